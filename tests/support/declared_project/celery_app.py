"""The project's Celery app, as Celery's guide writes it, with ``add_periodic_task`` in an
``on_after_configure`` handler (Celery's guide, Weblate) and in an ``on_after_finalize`` one
(PostHog, Baserow), named and unnamed."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.schedules import crontab

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.support.declared_project.settings")

# This test project borrows the platform's settings, whose package makes the platform's own app;
# made first, so that this app is the current one, as a project's single app is.
import project.celery  # noqa: F401

app = Celery("declared_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

LOG = os.environ.get("DECLARED_LOG", "/tmp/declared-executions.log")
APPEND = "tests.support.plain_tasks.append"


@app.on_after_configure.connect
def setup_periodic_tasks(sender: Celery, **kwargs: Any) -> None:
    # By name: the configuration is read before Django is set up, so no task module (which
    # imports Django's models) can be imported yet.
    append = sender.signature(APPEND)
    # Unnamed: Celery keys it by the signature's repr.
    sender.add_periodic_task(2.0, append.clone(args=(LOG, "configure-unnamed")))
    sender.add_periodic_task(3.0, append.clone(args=(LOG, "configure-named")), name="add every 3")


@app.on_after_finalize.connect
def setup_more_periodic_tasks(sender: Celery, **kwargs: Any) -> None:
    from tests.support.plain_tasks import append

    sender.add_periodic_task(
        crontab(minute="*"), append.s(LOG, "finalize-minutely"), name="finalize minutely"
    )
    sender.add_periodic_task(4.0, append.s(LOG, "finalize-unnamed"))
