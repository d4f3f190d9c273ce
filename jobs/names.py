"""What a name that is printed or routed may hold: no line break or other control character.

Names of jobs, queues, exchanges, routing keys, blackout windows, API tokens and lock keys are
printed in one-line CLI answers, log lines, alerts and the audit trail, or route a message: a line
break would split the line, a terminal escape rewrite it, a NUL fail in PostgreSQL. The rule is
here once, for the models' validators and for the checks outside them (lock keys).
"""

from __future__ import annotations

import re

from django.core.validators import RegexValidator

# C0 and C1 controls (line feed, carriage return, NUL, escape, NEL...), DEL, and Unicode's line
# and paragraph separators, which split lines too.
CONTROL_CHARACTERS = "\x00-\x1f\x7f-\x9f\u2028\u2029"
_CONTROL_CHARACTER = re.compile(f"[{CONTROL_CHARACTERS}]")


def has_control_character(text: str) -> bool:
    return _CONTROL_CHARACTER.search(text) is not None


def no_control_characters(what: str) -> RegexValidator:
    """A model field's validator refusing them in ``what`` (e.g. "A queue name")."""
    return RegexValidator(
        f"^[^{CONTROL_CHARACTERS}]*\\Z",
        f"{what} cannot contain a line break or another control character.",
        code="control_character_in_name",
    )
