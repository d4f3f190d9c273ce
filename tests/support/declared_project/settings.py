"""Settings modelled on real projects' own files: Paperless-ngx's ``CELERY_BEAT_SCHEDULE`` (seconds
and ``expires`` in the options), Saleor's (a ``timedelta``), Sentry's (``expires`` and ``queue``
options, a ``crontab``), with ``headers`` as Celery's ``apply_async`` takes them.

``DECLARED_LOG`` names the file every execution appends to; ``DECLARED_RELEASE=2`` is the next
release, from which one entry was removed."""

from __future__ import annotations

import os
from datetime import timedelta

from celery.schedules import crontab

from project.settings import *  # noqa: F403  (the project's settings, plus the schedule below)

LOG = os.environ.get("DECLARED_LOG", "/tmp/declared-executions.log")
RELEASE = os.environ.get("DECLARED_RELEASE", "1")
APPEND = "tests.support.plain_tasks.append"

# The test's workers consume one queue of their own.
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("DECLARED_QUEUE", "default")
CELERY_TIMEZONE = "America/Los_Angeles"

CELERY_BEAT_SCHEDULE = {
    # Paperless-ngx: "Check all e-mail accounts", seconds, options={"expires": ...}
    "Check all e-mail accounts": {
        "task": APPEND,
        "schedule": 2.0,
        "kwargs": {"log": LOG, "note": "mail"},
        "options": {"expires": 30.0, "headers": {"team": "mail"}},
    },
    # Saleor: a timedelta
    "update-exchange-rates": {
        "task": APPEND,
        "schedule": timedelta(seconds=3),
        "args": (LOG, "rates"),
    },
    # Sentry: a crontab with expires and an explicit queue
    "flush-buffers": {
        "task": APPEND,
        "schedule": crontab(minute="*"),
        "args": [LOG, "flush"],
        "options": {"expires": 50, "queue": CELERY_TASK_DEFAULT_QUEUE},
    },
}
if RELEASE == "1":
    # Removed in release 2.
    CELERY_BEAT_SCHEDULE["legacy-cleanup"] = {
        "task": APPEND,
        "schedule": 2.0,
        "args": [LOG, "legacy"],
    }
