"""The beat builds each job it publishes from its loaded columns (``scheduler._loaded_job``)
without ``Model.__init__``: the instance must be the one ``Job.from_db`` builds."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db.models.signals import post_init

from jobs.beat.scheduler import _JOB_COLUMNS, _loaded_job
from jobs.models import Job

COLUMNS = {
    "id": 7, "name": "nightly", "task": "demo.quick", "start_deadline": 300,
    "catch_up": "latest", "soft_time_limit": None, "time_limit": 30, "queue": "jobs",
    "priority": 4, "business_days_only": True, "holiday_calendar": "US",
    "active_from": None, "active_until": datetime(2027, 1, 1, tzinfo=UTC), "coalesce": False,
    "exchange": "", "routing_key": "", "updated_at": datetime(2026, 11, 1, tzinfo=UTC),
}  # fmt: skip
ROW = tuple(COLUMNS[name] for name in _JOB_COLUMNS)


def _fields(job: Job) -> dict[str, Any]:
    return {key: value for key, value in vars(job).items() if key != "_state"}


def test_a_loaded_job_is_from_dbs() -> None:
    expected = Job.from_db("default", list(_JOB_COLUMNS), ROW)
    job = _loaded_job(ROW)
    assert type(job) is Job
    assert _fields(job) == _fields(expected)
    assert job.get_deferred_fields() == expected.get_deferred_fields() != set()
    assert vars(job._state) == vars(expected._state)
    assert (job.pk, job.name, job.holiday_calendar) == (7, "nightly", "US")
    assert job == expected  # same model, same primary key


def test_with_an_init_signal_receiver_it_is_from_db_itself() -> None:
    seen: list[Job] = []

    def receiver(sender: type[Job], instance: Job, **kwargs: Any) -> None:
        seen.append(instance)

    post_init.connect(receiver, sender=Job)
    try:
        job = _loaded_job(ROW)
    finally:
        post_init.disconnect(receiver, sender=Job)
    assert seen == [job]
