"""What the Django tasks benchmark calls (``bench.django_tasks_bench``): a Django ``@task`` of
the cluster's backend, a ``GuardedTask`` Celery task and a plain Celery task, all no-ops.
Imported once Django is set up (``JOBS_MODULES``): defining a Django task needs the ``TASKS``
setting. Django 6 only."""

from __future__ import annotations

from celery import shared_task
from django.tasks import task  # type: ignore[import-not-found,unused-ignore]

from jobs import GuardedTask


@task
def noop(i: int) -> None:
    """Does nothing (a Django task)."""


@shared_task
def plain_noop(i: int) -> None:
    """Does nothing (a plain Celery task: its ``.delay()`` is Celery's own publish)."""


@shared_task(base=GuardedTask)
def guarded_noop(i: int) -> None:
    """Does nothing (a guarded Celery task)."""
