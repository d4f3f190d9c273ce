"""The pre-switch report (jobs.beat.switch_report, ``jobs adopt --dry-run``), on real
PostgreSQL: every periodic task of Celery's configuration and of django-celery-beat's rows, what
each becomes, its next slots as Celery and the cluster compute them, and what cannot be carried;
it writes nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from celery import schedules
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from jobs.beat import switch_report
from jobs.models import Job
from jobs.schedule.kinds import Every
from tests.support.job_factory import new_job

# Every test starts from an empty beat_schedule (the conftest fixture), restored after it.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("beat_schedule")]

APPEND = "tests.support.plain_tasks.append"
LOG = "/tmp/never-written"
NOW = datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC)


def _row(
    name: str, *, every: int | None = None, cron: str = "", enabled: bool = True
) -> PeriodicTask:
    """A django-celery-beat row as a project's own code or admin writes it."""
    schedule: dict[str, Any] = {}
    if every is not None:
        schedule["interval"], _ = IntervalSchedule.objects.get_or_create(
            every=every, period=IntervalSchedule.SECONDS
        )
    else:
        minute, hour, dom, month, dow = cron.split()
        schedule["crontab"], _ = CrontabSchedule.objects.get_or_create(
            minute=minute,
            hour=hour,
            day_of_month=dom,
            month_of_year=month,
            day_of_week=dow,
            timezone="UTC",
        )
    return PeriodicTask.objects.create(
        name=name, task=APPEND, args=json.dumps([LOG]), enabled=enabled, **schedule
    )


def test_the_report_judges_an_entry_as_adoption_will(beat_schedule: dict[str, Any]) -> None:
    beat_schedule["fine"] = {"task": APPEND, "schedule": 60.0, "args": [LOG]}
    # "origin" is one of the headers Celery itself puts on every message.
    beat_schedule["clashing header"] = {
        "task": APPEND,
        "schedule": 60.0,
        "args": [LOG],
        "options": {"headers": {"origin": "settings"}},
    }
    lines = {line.name: line for line in switch_report.report()}
    assert lines["fine"].carried and lines["fine"].job == "fine"
    assert not lines["clashing header"].carried
    assert "origin" in lines["clashing header"].reason
    assert not Job.objects.exists()


def test_a_configuration_entry_is_listed_with_both_computations_of_its_next_slots(
    beat_schedule: dict[str, Any],
) -> None:
    beat_schedule["nightly"] = {
        "task": APPEND,
        "schedule": schedules.crontab(minute="30", hour="2"),
        "args": [LOG],
    }
    (line,) = switch_report.report(NOW)
    assert (line.source, line.name, line.task, line.job) == (
        switch_report.CONFIGURATION,
        "nightly",
        APPEND,
        "nightly",
    )
    expected = ["2030-01-02T02:30:00Z", "2030-01-03T02:30:00Z", "2030-01-04T02:30:00Z"]
    assert line.our_next == line.celery_next == expected
    assert "differ" not in " ".join(line.changes)
    assert line.record()["carried"] is True and line.record()["our_next"] == expected


def test_an_entry_keyed_with_a_slash_becomes_a_job_named_without_it(
    beat_schedule: dict[str, Any],
) -> None:
    beat_schedule["reports/daily"] = {"task": APPEND, "schedule": 60.0, "args": [LOG]}
    (line,) = switch_report.report(NOW, count=2)
    assert line.carried and line.job != "reports/daily" and "/" not in line.job
    assert any("a job name holds no '/'" in change for change in line.changes)
    assert len(line.our_next) == len(line.celery_next) == 2


def test_rows_no_job_owns_are_listed_once_and_a_disabled_one_becomes_paused(
    beat_schedule: dict[str, Any],
) -> None:
    beat_schedule["hourly"] = {"task": APPEND, "schedule": 3600.0, "args": [LOG]}
    _row("hourly", every=3600)  # stock django-celery-beat's row of that entry
    _row("cleanup", cron="0 4 * * *")
    _row("dormant", every=600, enabled=False)
    owned = new_job("owned", APPEND, Every(60), args=[LOG])
    lines = switch_report.report(NOW)
    assert [(line.source, line.name) for line in lines] == [
        (switch_report.CONFIGURATION, "hourly"),
        (switch_report.ROW, "cleanup"),
        (switch_report.ROW, "dormant"),
    ]
    assert owned.name not in {line.name for line in lines}
    cleanup, dormant = lines[1], lines[2]
    assert cleanup.carried and cleanup.job == "cleanup" and cleanup.schedule
    assert cleanup.our_next[0] == cleanup.celery_next[0] == "2030-01-02T04:00:00Z"
    assert any("disabled" in change for change in dormant.changes)
    assert Job.objects.count() == 1  # the report wrote nothing


def test_not_carried_lists_what_would_not_run_with_its_reason(
    beat_schedule: dict[str, Any],
) -> None:
    beat_schedule["half a second"] = {"task": APPEND, "schedule": 0.5, "args": [LOG]}
    beat_schedule["fine"] = {"task": APPEND, "schedule": 60.0, "args": [LOG]}
    _row("job:gone", every=60)  # a removed job's own entry: refused
    _row("job:gone-and-off", every=60, enabled=False)  # would not run either: not listed
    _row("project row", every=60)  # adoptable
    lines = switch_report.not_carried()
    assert [(line.source, line.name) for line in lines] == [
        (switch_report.CONFIGURATION, "half a second"),
        (switch_report.ROW, "job:gone"),
    ]
    assert "not a whole number of seconds" in lines[0].reason and "job:<name>" in lines[1].reason
    assert not any(line.carried for line in lines)
