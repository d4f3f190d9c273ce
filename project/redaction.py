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

from functools import wraps
from typing import Any

import celery.app.utils

# The rules live with the app, which applies them to run logs too; this module installs them
# into Celery.
from jobs.values.redaction import HIDDEN_NAMES, MASK, URL_PASSWORD, redact

__all__ = ["HIDDEN_NAMES", "MASK", "URL_PASSWORD", "filter_hidden_settings", "install", "redact"]

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
