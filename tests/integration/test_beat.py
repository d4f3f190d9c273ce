"""The cluster scheduler against real PostgreSQL and the real broker, with an injected clock."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis
from django.conf import settings

from jobs import services
from jobs.beat import ClusterScheduler
from jobs.models import Job, JobRun
from jobs.schedules import Every
from project.celery import app

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "tests-beat"


@pytest.fixture
def broker() -> Iterator[redis.Redis]:
    if not str(settings.CELERY_BROKER_URL).startswith("redis://"):
        pytest.fail("these tests read the queue from Redis; CELERY_BROKER_URL is not Redis")
    client = redis.Redis.from_url(str(settings.CELERY_BROKER_URL))
    client.delete(QUEUE)
    yield client
    client.delete(QUEUE)
    client.close()


def _beat() -> ClusterScheduler:
    return ClusterScheduler(app=app)


def test_two_beats_firing_the_same_slot_create_one_run_and_one_message(
    make_job: Callable[..., Job], broker: redis.Redis
) -> None:
    job = make_job(schedule=Every(10), queue=QUEUE)
    first, second = _beat(), _beat()
    slot = datetime(2030, 1, 1, 0, 0, 10, tzinfo=UTC)
    for beat in (first, second):
        beat._tick(slot + timedelta(milliseconds=5))
        beat._tick(slot + timedelta(seconds=10, milliseconds=5))
    runs = list(JobRun.objects.filter(job=job).values_list("scheduled_for", flat=True))
    assert sorted(runs)[-2:] == [slot, slot + timedelta(seconds=10)]
    assert len(runs) == len(set(runs))
    assert broker.llen(QUEUE) == len(runs)


def test_all_due_slots_of_a_tick_go_out_in_one_pass(
    make_job: Callable[..., Job], broker: redis.Redis
) -> None:
    for n in range(25):
        make_job(f"j{n}", schedule=Every(5), queue=QUEUE)
    beat = _beat()
    now = datetime(2030, 1, 1, 0, 0, 5, tzinfo=UTC)
    beat._tick(now)
    beat._tick(now + timedelta(seconds=5))
    assert JobRun.objects.filter(scheduled_for=now + timedelta(seconds=5)).count() == 25
    assert broker.llen(QUEUE) == JobRun.objects.count()


def test_a_pause_is_picked_up_on_the_next_tick(
    make_job: Callable[..., Job], broker: redis.Redis
) -> None:
    job = make_job(schedule=Every(10), queue=QUEUE)
    beat = _beat()
    start = datetime(2030, 1, 1, tzinfo=UTC)
    beat._tick(start)
    services.pause(job.name)
    beat._tick(start + timedelta(seconds=10))
    beat._tick(start + timedelta(seconds=20))
    assert not JobRun.objects.filter(scheduled_for__gt=start).exists()


def test_a_new_job_is_picked_up_without_a_restart(
    make_job: Callable[..., Job], broker: redis.Redis
) -> None:
    beat = _beat()
    start = datetime(2030, 1, 1, tzinfo=UTC)
    beat._tick(start)
    job = make_job(schedule=Every(10), queue=QUEUE)
    beat._tick(start + timedelta(seconds=10))
    assert JobRun.objects.filter(job=job, scheduled_for=start + timedelta(seconds=10)).exists()


def test_a_restarted_beat_fires_the_latest_slot_only_within_its_deadline(
    make_job: Callable[..., Job], broker: redis.Redis
) -> None:
    fresh = make_job("fresh", schedule=Every(3600), queue=QUEUE, start_deadline=600)
    stale = make_job("stale", schedule=Every(3600), queue=QUEUE, start_deadline=60)
    hour = datetime(2030, 1, 1, 5, tzinfo=UTC)
    _beat()._tick(hour + timedelta(seconds=300))
    assert JobRun.objects.filter(job=fresh, scheduled_for=hour).exists()
    assert not JobRun.objects.filter(job=stale).exists()
