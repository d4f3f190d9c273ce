"""What the Django tasks benchmark calls (``bench.django_tasks_bench``): a Django ``@task`` of
the cluster's backend and a ``GuardedTask`` Celery task, both no-ops. Imported once Django is
set up (``JOBS_MODULES``): defining a Django task needs the ``TASKS`` setting. Django 6 only."""

from __future__ import annotations

from celery import shared_task
from django.tasks import task  # type: ignore[import-not-found,unused-ignore]

from jobs import GuardedTask


@task
def noop(i: int) -> None:
    """Does nothing (a Django task)."""


@shared_task(base=GuardedTask)
def guarded_noop(i: int) -> None:
    """Does nothing (a guarded Celery task)."""
