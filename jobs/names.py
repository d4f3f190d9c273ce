"""What a name that is printed or routed may hold: no line break or other control character, and,
for the names people type and read (jobs, blackout windows, API tokens), no space at either end.

Names of jobs, queues, exchanges, routing keys, blackout windows, API tokens and lock keys are
printed in one-line CLI answers, log lines, alerts and the audit trail, or route a message: a line
break would split the line, a terminal escape rewrite it, a NUL fail in PostgreSQL. A name that
begins or ends with a space (or is blank) prints like another name, or like none, in every table
and listing. The rules are here once, as regular-expression text that Python's ``re`` and
PostgreSQL's ``~`` read alike: for the models' validators, the database's CHECK constraints (rows
written around the services) and the checks outside them (lock keys, entry keys).
"""

from __future__ import annotations

import hashlib
import json
import re

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db.models import Q

# C0 and C1 controls (line feed, carriage return, NUL, escape, NEL...), DEL, and Unicode's line
# and paragraph separators, which split lines too.
CONTROL_CHARACTERS = r"\x00-\x1f\x7f-\x9f\u2028\u2029"
# The spaces that are not control characters: what ``str.isspace()`` adds to them.
SPACES = r" \u00a0\u1680\u2000-\u200a\u202f\u205f\u3000"

HOLDS_CONTROL_CHARACTER = f"[{CONTROL_CHARACTERS}]"
# Blank, or a space first or last (\A and \Z mean the same in both engines; $ does not).
PADDED_OR_BLANK = rf"\A\Z|\A[{SPACES}]|[{SPACES}]\Z"
HOLDS_SLASH = "/"

_CONTROL_CHARACTER = re.compile(HOLDS_CONTROL_CHARACTER)
_PADDED_OR_BLANK = re.compile(PADDED_OR_BLANK)


def has_control_character(text: str) -> bool:
    return _CONTROL_CHARACTER.search(text) is not None


def is_padded_or_blank(text: str) -> bool:
    return _PADDED_OR_BLANK.search(text) is not None


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
    not_padded("A job name"),
]


def job_name_problems(name: str) -> list[str]:
    """What ``JOB_NAME_VALIDATORS`` say of ``name`` (for checks made before a model exists)."""
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
    (U+2215), a control character a space, a space at either end (or a blank key) the symbol
    for space (U+2420), and a key too long is cut with a digest of the whole, so the name is the
    same on every beat and a key that already is a job's name is kept as it is."""
    name = _NOT_IN_JOB_NAMES.sub(lambda m: DIVISION_SLASH if m.group() == "/" else " ", key)
    name = _SPACE_AT_AN_END.sub(lambda m: SYMBOL_FOR_SPACE * len(m.group()), name)
    name = name or SYMBOL_FOR_SPACE
    if len(name) > MAX_JOB_NAME:
        digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()
        name = f"{name[: MAX_JOB_NAME - 9]}~{digest[:8]}"
    return name
