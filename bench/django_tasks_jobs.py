"""What the Django tasks benchmark calls (``bench.django_tasks_bench``): a Django ``@task`` of
the cluster's backend, one of django-tasks-db's (the ``db`` alias of
``bench.django_tasks_settings``), a ``GuardedTask`` Celery task and plain Celery tasks, all
no-ops but for the counter one bumps (a plain task records nothing the bench could count).
Imported once Django is set up (``JOBS_MODULES``): defining a Django task needs the ``TASKS``
setting. Django 6 only."""

from __future__ import annotations

from functools import cache

import redis
from celery import shared_task
from django.conf import settings
from django.tasks import task  # type: ignore[import-not-found,unused-ignore]

from jobs import GuardedTask


@task
def noop(i: int) -> None:
    """Does nothing (a Django task)."""


@task(backend="db")
def db_noop(i: int) -> None:
    """Does nothing (a Django task of django-tasks-db's backend, run by its ``db_worker``)."""


@shared_task
def plain_noop(i: int) -> None:
    """Does nothing (a plain Celery task: its ``.delay()`` is Celery's own publish)."""


@shared_task(base=GuardedTask)
def guarded_noop(i: int) -> None:
    """Does nothing (a guarded Celery task)."""


@shared_task
def counted_noop(key: str) -> None:
    """Adds one to Redis counter ``key`` (a plain Celery task, counted as it completes)."""
    _broker().incr(key)


@cache
def _broker() -> redis.Redis:
    return redis.Redis.from_url(settings.CELERY_BROKER_URL)
