"""What any text people give must be before it is kept or printed, and how much of it is kept.

Storable: PostgreSQL's ``text`` and ``jsonb`` hold UTF-8 without NUL. A Python string holds
more: a lone surrogate (a code point U+D800 to U+DFFF outside a pair), which JSON's ``"\\ud800"``
escape makes and which Python makes of a command-line argument's invalid UTF-8 bytes
(``surrogateescape``), cannot be encoded as UTF-8, so psycopg and a UTF-8 terminal raise on it.
Every edge (the API's bodies, the admin's forms, the CLI's arguments, a Django task's
arguments) and the services' one write path ask ``problem`` of each text before it goes further,
and a lookup by a name that cannot be stored finds nothing without asking the database.

Bounded: free text (descriptions) and the JSON arguments an operator gives a job or a run are
stored and shown whole, so each has a bound here, named in docs/security.md.
"""

from __future__ import annotations

import re

# A job's or a blackout window's description, in characters.
MAX_DESCRIPTION = 2000
# A job's args or kwargs, or a run's kwargs, as compact UTF-8 JSON, in bytes.
MAX_ARGUMENTS_BYTES = 64 * 1024
# How much of a long text a list (the admin's, the CLI's tables) shows; the detail shows all.
LIST_CUT = 80

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def problem(text: str) -> str | None:
    """Why PostgreSQL (and a UTF-8 terminal) cannot hold ``text``, or ``None`` if they can."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return r"cannot contain the NUL character (\u0000)"
    return (
        f"is not valid UTF-8 text: it holds a lone surrogate (U+{ord(found.group()):04X}), "
        "which cannot be stored"
    )


def is_storable(text: str) -> bool:
    return _UNSTORABLE.search(text) is None


def printable(text: str) -> str:
    """``text`` with whatever UTF-8 cannot encode written as an escape (``\\udcff``), for an
    error line that names a value which could not be stored."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def cut(text: str, limit: int = LIST_CUT) -> str:
    """``text`` shortened to ``limit`` characters for a list, an ellipsis saying it was."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
