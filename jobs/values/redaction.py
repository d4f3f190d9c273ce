"""Secrets out of what the cluster shows or keeps: every URL's password masked, and values
under names that carry credentials hidden whole.

One set of rules for everything that shows text it did not write: what Celery shows of its
configuration (``project/redaction.py`` installs it there) and each line of a run's own log
(``jobs.runlog``). Celery hides settings by name (``HIDDEN_SETTINGS``: KEY, SECRET, PASS,
DATABASE, ...); a few more names that carry credentials are hidden too, and the password of a
URL is masked wherever it appears, whatever its setting is called.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from celery.app.utils import HIDDEN_SETTINGS  # type: ignore[attr-defined]  # not in the stubs

MASK = "********"
# Names Celery leaves visible that carry credentials: ``user:password`` pairs, webhooks whose
# URL is the secret, DSNs that embed a key.
HIDDEN_NAMES = re.compile("BASIC_AUTH|CREDENTIAL|WEBHOOK|DSN", re.IGNORECASE)
# ``scheme://user:password@``: the password runs to the ``@`` (a literal ``@`` or ``/`` in a
# password must be percent-encoded in a URL). Several URLs in one value are all masked.
URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@]*:)[^\s/@]+@")


def redact(value: Any, name: str | None = None) -> Any:
    """``value`` with every URL's password masked, and masked whole under a hidden ``name``
    (ours or Celery's); mappings, lists and tuples are walked."""
    if name is not None and (HIDDEN_NAMES.search(name) or HIDDEN_SETTINGS.search(name)):
        return MASK
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {
            key: redact(item, key if isinstance(key, str) else None) for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact(item) for item in value]
    if isinstance(value, tuple):
        return tuple(redact(item) for item in value)
    return value


def redact_text(text: str) -> str:
    """``text`` with the password of every URL in it masked."""
    return URL_PASSWORD.sub(rf"\g<head>{MASK}@", text)
