"""How ``make test`` runs the suite: in several pytest processes side by side (pytest-xdist).

Most of the suite's time is acceptance scenarios waiting for real processes and real clocks (a
beat's next slot, a lease's expiry), which costs the machine little, so several scenarios share
it well. Each process keeps apart from the others as ``tests/side_by_side.py`` says.
``JOBS_TEST_PROCESSES`` sets how many (``1``: one process, as plain ``pytest`` runs); options of
the caller's own that choose xdist's processes win.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

DEFAULT_PROCESSES = 3
ISOLATION_PLUGIN = ["-p", "tests.side_by_side"]
# Options by which a caller already chose how (or whether) pytest-xdist runs.
_XDIST_OPTIONS = ("-n", "--numprocesses", "--dist", "--tx", "-d")


def pytest_options(args: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """The options ``make test`` adds in front of the caller's ``args``."""
    if "no:xdist" in args:
        return []
    if any(_chooses_xdist(arg) for arg in args):
        return ISOLATION_PLUGIN
    processes = int(environ.get("JOBS_TEST_PROCESSES") or DEFAULT_PROCESSES)
    if processes <= 1:
        return ISOLATION_PLUGIN
    # loadgroup: tests marked with the same xdist_group run in one process, one after another.
    return [*ISOLATION_PLUGIN, "-n", str(processes), "--dist", "loadgroup"]


def _chooses_xdist(arg: str) -> bool:
    name = arg.split("=", 1)[0]
    return name in _XDIST_OPTIONS or (arg.startswith("-n") and not arg.startswith("--"))
