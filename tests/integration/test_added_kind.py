"""A kind added by one module (tests/support/days_at.py, "every N days at HH:MM") is a schedule
like the built-in ones: its words, its django-celery-beat row both ways, and its slots, which
the beat's tick fires. Nothing of ``jobs/`` knows it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, time, timedelta

import pytest
import redis
from django.utils import timezone

from jobs.beat import entries
from jobs.beat.scheduler import ClusterScheduler
from jobs.forms import JobForm
from jobs.models import Job, JobRun
from jobs.schedule.kinds import Every, describe
from jobs.schedule.slots import latest_slot, next_slot, slots_in
from project.celery import app
from tests.support.days_at import DaysAt, registered_days_at
from tests.support.virtual_clock import VirtualClock

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "tests-added-kind"


@pytest.fixture(autouse=True)
def _days_at() -> Iterator[None]:
    with registered_days_at():
        yield


def test_its_slots_words_and_row() -> None:
    schedule = DaysAt(days=2, at=time(9, 30), since=timezone.now().date())
    first = schedule.next_slot(timezone.now() - timedelta(days=1))
    assert first is not None and first.time() == time(9, 30)
    assert next_slot(schedule, first) == first + timedelta(days=2)
    assert latest_slot(schedule, first + timedelta(days=3)) == first + timedelta(days=2)
    window = slots_in(schedule, first, first + timedelta(days=6), limit=10)
    assert window.slots == [first + timedelta(days=d) for d in (2, 4, 6)]
    assert describe(schedule).startswith("every 2 days at 09:30 (UTC)")


def test_its_row_reads_back_as_itself_and_an_interval_s_row_as_an_interval(
    make_job: Callable[..., Job],
) -> None:
    schedule = DaysAt(days=3, at=time(7, 15), since=timezone.now().date())
    job = make_job("days", schedule=schedule)
    job.refresh_from_db()
    assert entries.schedule_of(job.periodic_task) == schedule
    interval = make_job("interval", schedule=Every(60))
    interval.refresh_from_db()
    assert entries.schedule_of(interval.periodic_task) == Every(60)


def test_the_beat_s_tick_fires_its_slots(
    make_job: Callable[..., Job], redis_broker: redis.Redis
) -> None:
    # Beat time an hour behind the database's, as in test_scheduler.py.
    clock = VirtualClock(timezone.now().replace(second=0, microsecond=0) - timedelta(hours=1))
    first = (clock.now + timedelta(minutes=10)).astimezone(UTC)
    job = make_job(
        "days", schedule=DaysAt(days=2, at=first.time(), since=first.date()), queue=QUEUE
    )
    beat = ClusterScheduler(app=app, clock=clock, maintain=False)
    beat.tick_at(first - timedelta(seconds=1))
    beat.tick_at(first + timedelta(milliseconds=5))
    beat.tick_at(first + timedelta(days=1))
    beat.tick_at(first + timedelta(days=2, milliseconds=5))
    fired = sorted(JobRun.objects.filter(job=job).values_list("scheduled_for", flat=True))
    assert fired == [first, first + timedelta(days=2)]
    assert redis_broker.llen(QUEUE) == 2


def test_the_admin_form_offers_shows_and_reads_it(make_job: Callable[..., Job]) -> None:
    schedule = DaysAt(days=2, at=time(9, 30), since=timezone.now().date())
    form = JobForm(instance=make_job("days", schedule=schedule))
    assert ("days_at", "every N days at") in form.fields["schedule_type"].choices  # type: ignore[attr-defined]
    assert form.initial["schedule_type"] == "days_at"
    assert form.initial["every"] == "2d"
    first = datetime.combine(schedule.since, schedule.at, UTC)
    assert form._parse_schedule("days_at", {"every": "3d", "run_at": first}) == DaysAt(
        days=3, at=time(9, 30), since=schedule.since
    )
