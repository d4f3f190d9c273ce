"""The beat (each job of a burst) and the claim (each run) build a ``Job`` from the columns they
read with ``jobs.models.job_from_columns``, without ``Model.__init__``: the instance must be the
one ``Job.from_db`` builds."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.db.models.signals import post_init

from jobs.beat.scheduler import _JOB_COLUMNS
from jobs.guard.run_records import _JOB_FIELDS
from jobs.models import Job, job_from_columns

VALUES = {
    "id": 7, "name": "nightly", "task": "demo.quick", "start_deadline": 300,
    "catch_up": "latest", "soft_time_limit": None, "time_limit": 30, "queue": "jobs",
    "priority": 4, "business_days_only": True, "holiday_calendar": "US",
    "active_from": None, "active_until": datetime(2027, 1, 1, tzinfo=UTC), "coalesce": False,
    "exchange": "", "routing_key": "", "updated_at": datetime(2026, 11, 1, tzinfo=UTC),
    "args": [1], "kwargs": {"a": 1}, "overlap": "skip", "on_lost": "record", "max_retries": 2,
    "retry_backoff": 5.0, "lease_ttl": 30, "min_hold": 0.0, "max_concurrency": 1,
    "adopted": True, "headers": {"tenant": "acme"}, "expires_at": None, "one_off": False,
}  # fmt: skip
# The beat's columns in the model's order; the claim's in its own (not the model's).
COLUMN_SETS = {"beat": _JOB_COLUMNS, "claim": _JOB_FIELDS}


def _fields(job: Job) -> dict[str, Any]:
    return {key: value for key, value in vars(job).items() if key != "_state"}


@pytest.mark.parametrize("reader", COLUMN_SETS)
def test_a_job_from_columns_is_from_dbs(reader: str) -> None:
    names = COLUMN_SETS[reader]
    values = [VALUES[name] for name in names]
    order = [f.attname for f in Job._meta.concrete_fields if f.attname in names]
    expected = Job.from_db("default", order, [VALUES[name] for name in order])
    job = job_from_columns(names, values)
    assert type(job) is Job
    assert _fields(job) == _fields(expected)
    assert job.get_deferred_fields() == expected.get_deferred_fields() != set()
    assert vars(job._state) == vars(expected._state)
    assert (job.pk, job.name, job.queue) == (7, "nightly", "jobs")
    assert job == expected  # same model, same primary key


@pytest.mark.parametrize("reader", COLUMN_SETS)
def test_with_an_init_signal_receiver_it_is_from_db_itself(reader: str) -> None:
    seen: list[Job] = []

    def receiver(sender: type[Job], instance: Job, **kwargs: Any) -> None:
        seen.append(instance)

    names = COLUMN_SETS[reader]
    post_init.connect(receiver, sender=Job)
    try:
        job = job_from_columns(names, [VALUES[name] for name in names])
    finally:
        post_init.disconnect(receiver, sender=Job)
    assert seen == [job]
    assert (job.pk, job.queue) == (7, "jobs")
