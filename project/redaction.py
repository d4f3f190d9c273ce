"""Secrets out of what Celery shows of its configuration: a worker's ``conf`` inspect reply
(Flower's Config tab, ``celery inspect conf``) and ``celery report``.

Celery censors settings by name (``celery.app.utils.filter_hidden_settings``: names with KEY,
SECRET, PASS, DATABASE, ...) and masks the password of ``broker_url`` under that exact name
only. Read through Django's settings (namespace ``CELERY``) the broker URL is
``CELERY_BROKER_URL``, which it shows whole, password included. And a name it hides (DATABASE,
KEY, ...) it hides only when the value is no mapping: ``DATABASES`` it walks, masking the password
alone and showing the engine, user, host and port. Three rules are added to Celery's: the password
of every URL is masked, whatever its setting is called, a few more names that carry credentials
are hidden whole, and so is every name Celery hides, whatever its value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import wraps
from typing import Any

import celery.app.utils
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
        return URL_PASSWORD.sub(rf"\g<head>{MASK}@", value)
    if isinstance(value, Mapping):
        return {
            key: redact(item, key if isinstance(key, str) else None) for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact(item) for item in value]
    if isinstance(value, tuple):
        return tuple(redact(item) for item in value)
    return value


_celery_censor = celery.app.utils.filter_hidden_settings


@wraps(_celery_censor)
def filter_hidden_settings(conf: dict[str, Any]) -> dict[str, Any]:
    """Celery's censoring, then ``redact``."""
    censored: dict[str, Any] = redact(_celery_censor(conf))
    return censored


def install() -> None:
    """Censor every configuration table Celery prints or sends with both rule sets.

    ``Settings.table(censored=True)``, behind both the ``conf`` control command and ``celery
    report``, looks ``filter_hidden_settings`` up in its module on each call, and Celery has no
    setting to choose it: so the module's name is pointed at this one.
    """
    celery.app.utils.filter_hidden_settings = filter_hidden_settings
