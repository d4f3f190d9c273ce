"""One job's broken schedule row never stops a beat nor delays another job's slots.

Rows are corrupted straight in SQL, around every validation, as a bad migration, a script or an
old tool would; the beat sets the job aside with the error (``ScheduleError``), keeps every other
job's slots, and schedules the job again once it is fixed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
import redis
from django.db import connection
from django.utils import timezone

from jobs import services
from jobs.audit import Actor
from jobs.beat.scheduler import ClusterScheduler
from jobs.models import Job, JobRun, ScheduleError
from jobs.schedule import slots
from jobs.schedule.kinds import Cron, Every
from project.celery import app

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "tests-beat-isolation"


@pytest.fixture
def start() -> datetime:
    # An hour behind the database clock, as in test_beat: the test's own edits are "after now".
    return timezone.now().replace(second=0, microsecond=0) - timedelta(hours=1)


def _beat(now: datetime) -> ClusterScheduler:
    return ClusterScheduler(app=app, clock=lambda: now, maintain=False)


def _sql(statement: str, *params: int | str | None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, list(params))


def _slots(job: Job) -> list[datetime]:
    return sorted(JobRun.objects.filter(job=job).values_list("scheduled_for", flat=True))


def _error(job: Job) -> str | None:
    row = ScheduleError.objects.filter(job=job).first()
    return None if row is None else row.error


def _ticks(beat: ClusterScheduler, first: datetime, count: int, step: int = 10) -> None:
    for n in range(count):
        beat.tick_at(first + timedelta(seconds=step * n, milliseconds=5))


CORRUPTIONS = {
    "never-firing cron": (
        "UPDATE django_celery_beat_crontabschedule SET day_of_month = '31', month_of_year = '2'"
        " WHERE id = (SELECT crontab_id FROM django_celery_beat_periodictask WHERE id = %s)",
        "never",
    ),
    "unknown time zone": (
        "UPDATE django_celery_beat_crontabschedule SET timezone = 'Nowhere/Zone'"
        " WHERE id = (SELECT crontab_id FROM django_celery_beat_periodictask WHERE id = %s)",
        "Nowhere/Zone",
    ),
    "time zone that is a directory": (
        "UPDATE django_celery_beat_crontabschedule SET timezone = 'America'"
        " WHERE id = (SELECT crontab_id FROM django_celery_beat_periodictask WHERE id = %s)",
        "America",
    ),
    "cron field that is not cron": (
        "UPDATE django_celery_beat_crontabschedule SET minute = 'every-now-and-then'"
        " WHERE id = (SELECT crontab_id FROM django_celery_beat_periodictask WHERE id = %s)",
        "every-now-and-then",
    ),
    "interval of zero": (
        "UPDATE django_celery_beat_intervalschedule SET every = 0"
        " WHERE id = (SELECT interval_id FROM django_celery_beat_periodictask WHERE id = %s)",
        "shorter than one second",
    ),
    "interval in an unknown unit": (
        "UPDATE django_celery_beat_intervalschedule SET period = 'fortnights'"
        " WHERE id = (SELECT interval_id FROM django_celery_beat_periodictask WHERE id = %s)",
        "fortnights",
    ),
    "no schedule at all": (
        "UPDATE django_celery_beat_periodictask SET crontab_id = NULL, interval_id = NULL"
        " WHERE id = %s",
        "no schedule",
    ),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_corrupted_row_sets_its_job_aside_and_every_other_job_keeps_its_slots(
    corruption: str,
    make_job: Callable[..., Job],
    redis_broker: redis.Redis,
    start: datetime,
) -> None:
    healthy = make_job("healthy", schedule=Every(10), queue=QUEUE)
    statement, words = CORRUPTIONS[corruption]
    # Its own schedule row (rows are shared between jobs with the same schedule).
    schedule = Every(37) if "interval" in corruption else Cron("7 3 * * *")
    broken = make_job("broken", schedule=schedule, queue=QUEUE)
    _sql(statement, broken.periodic_task_id)

    beat = _beat(start)  # a beat started after the corruption stays up ...
    _ticks(beat, start + timedelta(seconds=10), 3)

    assert _slots(healthy) == [start + timedelta(seconds=10 * n) for n in (1, 2, 3)]
    assert _slots(broken) == []
    error = _error(broken)
    assert error is not None and words in error
    assert _error(healthy) is None


def test_a_row_corrupted_while_the_beat_runs_is_set_aside_and_picked_up_again_when_fixed(
    make_job: Callable[..., Job], redis_broker: redis.Redis, start: datetime
) -> None:
    healthy = make_job("healthy", schedule=Every(10), queue=QUEUE)
    broken = make_job("broken", schedule=Cron("11 5 * * *"), queue=QUEUE)
    beat = _beat(start)
    beat.tick_at(start)
    statement, _ = CORRUPTIONS["never-firing cron"]
    _sql(statement, broken.periodic_task_id)
    _ticks(beat, start + timedelta(seconds=10), 4)
    assert "never" in (_error(broken) or "")
    assert _slots(healthy) == [start + timedelta(seconds=10 * n) for n in (1, 2, 3, 4)]

    services.save_job(
        Job.objects.get(pk=broken.pk), Every(10), actor=Actor.code("tests")
    )  # fixed by an operator
    _ticks(beat, start + timedelta(seconds=50), 1)
    assert _error(broken) is None
    fixed_at = Job.objects.get(pk=broken.pk).updated_at
    # Its first slot is the first one after the fix, as for any edit (here: beat time is an
    # hour behind, so the next ticks of the test are before the fix; look a beat ahead).
    later = _beat(fixed_at + timedelta(seconds=10))
    later.tick_at(fixed_at + timedelta(seconds=10))
    assert _slots(broken), "the fixed job is scheduled again"


def test_a_job_whose_next_slot_cannot_be_computed_at_fire_time_is_set_aside_alone(
    make_job: Callable[..., Job],
    redis_broker: redis.Redis,
    start: datetime,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    healthy = make_job("healthy", schedule=Every(10), queue=QUEUE)
    doomed = make_job("doomed", schedule=Every(15), queue=QUEUE)
    beat = _beat(start)
    beat.tick_at(start)
    real_next_slot = slots.next_slot

    def failing_for_fifteen(schedule: object, now: datetime) -> datetime | None:
        if isinstance(schedule, Every) and schedule.seconds == 15:
            raise OverflowError("date value out of range")
        return real_next_slot(schedule, now)  # type: ignore[arg-type]

    monkeypatch.setattr(slots, "next_slot", failing_for_fifteen)
    _ticks(beat, start + timedelta(seconds=10), 4)
    assert _slots(healthy) == [start + timedelta(seconds=10 * n) for n in (1, 2, 3, 4)]
    assert _slots(doomed) == [start + timedelta(seconds=15)]  # fired, then no next slot
    assert "OverflowError" in (_error(doomed) or "")


def test_a_bug_in_one_tick_does_not_stop_the_beat(
    make_job: Callable[..., Job],
    redis_broker: redis.Redis,
    start: datetime,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = make_job("steady", schedule=Every(10), queue=QUEUE)
    now = [start]
    beat = ClusterScheduler(app=app, clock=lambda: now[0], maintain=False)
    beat.tick()
    monkeypatch.setattr(beat, "_apply_changes", lambda now: 1 / 0)
    now[0] = start + timedelta(seconds=10, milliseconds=5)
    assert beat.tick() > 0  # logged, retried later: the beat process lives on
    monkeypatch.undo()
    beat.tick()
    assert _slots(job) == [start + timedelta(seconds=10)]


def test_errors_of_jobs_that_are_paused_or_deleted_are_cleared(
    make_job: Callable[..., Job], redis_broker: redis.Redis, start: datetime
) -> None:
    broken = make_job("broken", schedule=Cron("9 4 * * *"), queue=QUEUE)
    statement, _ = CORRUPTIONS["unknown time zone"]
    _sql(statement, broken.periodic_task_id)
    beat = _beat(start)
    beat.tick_at(start)
    assert _error(broken) is not None
    services.pause("broken", actor=Actor.code("tests"))
    beat.tick_at(start + timedelta(seconds=1))
    assert _error(broken) is None


def test_a_job_with_a_broken_schedule_can_be_paused_resumed_and_removed(
    make_job: Callable[..., Job], redis_broker: redis.Redis
) -> None:
    broken = make_job("broken", schedule=Cron("9 4 * * *"), queue=QUEUE)
    statement, _ = CORRUPTIONS["time zone that is a directory"]
    _sql(statement, broken.periodic_task_id)
    assert not services.pause("broken", actor=Actor.code("tests")).enabled
    assert services.resume("broken", actor=Actor.code("tests")).enabled
    services.remove("broken", actor=Actor.code("tests"))
    assert not Job.objects.filter(name="broken").exists()
