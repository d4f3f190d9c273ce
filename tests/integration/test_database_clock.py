"""The database's clock (jobs.database.database_clock), against real PostgreSQL: ``now()`` is the
transaction's start, the instant is not, and ages are measured by it."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import transaction

from jobs.database.database_clock import age_of, database_instant, database_now
from jobs.models import Job, JobRun
from tests.support.job_factory import new_run

pytestmark = pytest.mark.django_db


def test_now_is_the_transactions_start_and_the_instant_moves_on() -> None:
    with transaction.atomic():
        now, instant = database_now(), database_instant()
        time.sleep(0.02)
        assert database_now() == now
        later = database_instant()
    assert now.tzinfo is not None and instant >= now
    assert later - instant >= timedelta(milliseconds=20)


def test_an_age_is_measured_by_the_database_clock(make_job: Callable[..., Job]) -> None:
    run = new_run(make_job(), ago=90)
    aged = JobRun.objects.annotate(age=age_of("scheduled_for")).get(pk=run.pk)
    assert timedelta(seconds=89) < aged.age < timedelta(seconds=120)
