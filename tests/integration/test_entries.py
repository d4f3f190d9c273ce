"""The beat entries of jobs (jobs.beat.entries): the ``PeriodicTask`` that carries a job's
schedule, written from the job and read back as the same schedule."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.db import connection
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

import tests.support.jobs_continuous  # noqa: F401  (registers the functions)
from jobs.beat import entries
from jobs.models import Job
from jobs.schedule.kinds import At, Cron, Every, Schedule, Solar

pytestmark = pytest.mark.django_db

ANCHOR = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)


def _entry(job: Job) -> PeriodicTask:
    return PeriodicTask.objects.get(pk=Job.objects.get(pk=job.pk).periodic_task_id)


def test_the_platforms_entries_are_named_after_their_job() -> None:
    assert entries.beat_entry_name("report") == "job:report"


@pytest.mark.parametrize(
    "schedule",
    [
        Every(90),
        Every(3600, anchor=ANCHOR),
        Cron("30 9 * * 1-5", tz="Europe/Paris"),
        At(datetime(2030, 6, 1, 12, 0, tzinfo=UTC)),
        Solar("sunrise", 48.85, 2.35),
    ],
    ids=["every", "every-anchored", "cron", "at", "solar"],
)
def test_a_stored_schedule_reads_back_the_same(
    make_job: Callable[..., Job], schedule: Schedule
) -> None:
    job = make_job("report", schedule=schedule)
    task = _entry(job)
    assert entries.schedule_of(task) == schedule
    assert task.one_off == isinstance(schedule, At)
    kinds = [task.interval_id, task.crontab_id, task.clocked_id, task.solar_id]
    assert sum(kind is not None for kind in kinds) == 1


def test_the_entry_carries_the_jobs_name_task_flag_and_queue(make_job: Callable[..., Job]) -> None:
    job = make_job("report", queue="reports", enabled=False)
    task = _entry(job)
    assert task.name == "job:report" and task.task == job.task
    assert json.loads(task.kwargs) == {"job": "report"}
    assert (task.enabled, task.queue) == (False, "reports")
    assert "report" in task.description


def test_storing_a_new_schedule_replaces_the_old_one_on_the_same_entry(
    make_job: Callable[..., Job],
) -> None:
    job = Job.objects.select_related("periodic_task").get(
        pk=make_job("report", schedule=Every(60)).pk
    )
    before = job.periodic_task_id
    task = entries.store(job, Cron("0 3 * * *", tz="UTC"))
    assert task.pk == before
    task.refresh_from_db()
    assert task.interval_id is None and task.start_time is None
    assert entries.schedule_of(task) == Cron("0 3 * * *", tz="UTC")


def test_equal_intervals_share_one_schedule_row(make_job: Callable[..., Job]) -> None:
    make_job("a", schedule=Every(45))
    make_job("b", schedule=Every(45))
    assert IntervalSchedule.objects.filter(every=45, period=IntervalSchedule.SECONDS).count() == 1


def test_refresh_saves_the_jobs_edits_into_its_entry(make_job: Callable[..., Job]) -> None:
    job = Job.objects.select_related("periodic_task").get(pk=make_job("report").pk)
    job.enabled = False
    job.queue = "elsewhere"
    entries.refresh(job)
    task = _entry(job)
    assert (task.enabled, task.queue) == (False, "elsewhere")


def test_refresh_of_a_continuous_job_has_no_entry_to_save(
    make_job: Callable[..., Job], tmp_path: Path
) -> None:
    count = PeriodicTask.objects.count()
    job = make_job("c", "tests.continuous.step", None, kwargs={"log": str(tmp_path / "log")})
    assert job.periodic_task is None
    entries.refresh(job)
    assert PeriodicTask.objects.count() == count


def test_no_entry_is_no_schedule() -> None:
    assert entries.schedule_of(None) is None


def test_an_entry_without_a_schedule_or_with_a_sub_second_interval_is_refused() -> None:
    bare = PeriodicTask(name="bare", task="t")
    with pytest.raises(ValueError, match="has no schedule"):
        entries.schedule_of(bare)
    tiny = IntervalSchedule(every=10, period=IntervalSchedule.MICROSECONDS)
    with pytest.raises(ValueError, match="shorter than one second"):
        entries.schedule_of(PeriodicTask(name="tiny", task="t", interval=tiny))
    odd = IntervalSchedule(every=1, period="fortnights")
    with pytest.raises(ValueError, match="not a known unit"):
        entries.schedule_of(PeriodicTask(name="odd", task="t", interval=odd))


def test_a_crontab_row_with_a_corrupted_zone_still_loads(make_job: Callable[..., Job]) -> None:
    entries.read_time_zones_leniently()  # already done by the app; doing it again is harmless
    job = make_job("report", schedule=Cron("0 3 * * *", tz="UTC"))
    crontab_id = _entry(job).crontab_id
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE django_celery_beat_crontabschedule SET timezone = 'Not/AZone' WHERE id = %s",
            [crontab_id],
        )
    assert str(CrontabSchedule.objects.get(pk=crontab_id).timezone) == "Not/AZone"
    assert list(PeriodicTask.objects.select_related("crontab"))  # every row still loads
    with pytest.raises(ValueError):
        entries.schedule_of(_entry(job))
