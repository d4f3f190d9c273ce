"""The Celery application. ``celery -A project worker`` and ``celery -A project beat`` use it."""

from __future__ import annotations

import os

from celery import Celery

from project import connection_names, redaction

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
# Celery shows its configuration (inspect conf, Flower's Config tab, celery report), which here
# is all of Django's settings: no password in it may be shown.
redaction.install()
# Connections named after the process's kind in pg_stat_activity (docs/connections.md).
connection_names.connect()

app = Celery("project")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Job modules are imported by JobsConfig.ready(); each registered job is a shared task.
app.autodiscover_tasks()
