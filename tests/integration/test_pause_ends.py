"""The end of a pause (jobs/beat/pause_ends.py): the first beat tick at or after a pause's
``until`` resumes the job, once however many beats tick, audited as the automatic resume; a pause
changed before its end is left alone. Pausing itself: test_pause.py."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
import redis
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.beat import pause_ends
from jobs.beat.scheduler import ClusterScheduler
from jobs.database.database_clock import database_now
from jobs.models import AuditAction, Job, JobRun
from jobs.schedule.kinds import Every
from project.celery import app
from tests.integration.test_pause import _audit, _pause
from tests.support.virtual_clock import VirtualClock

QUEUE = "tests-pause"  # the beat tests' messages, emptied by the redis_broker fixture


def _beat(clock: Callable[[], datetime]) -> ClusterScheduler:
    return ClusterScheduler(app=app, clock=clock, maintain=False)


@pytest.mark.django_db(transaction=True)
def test_a_pause_ends_at_the_first_tick_after_until_once_with_two_beats(
    make_job: Callable[..., Job], redis_broker: redis.Redis
) -> None:
    job = make_job("report", schedule=Every(10), queue=QUEUE)
    clock = VirtualClock(database_now())
    first, second = _beat(clock), _beat(clock)
    first.tick_at(clock.now)
    second.tick_at(clock.now)
    until = _pause("report", "deploy", "30s").paused_until
    assert until is not None

    clock.now = until - timedelta(seconds=1)
    first.tick_at(clock.now)
    assert not Job.objects.get(pk=job.pk).enabled
    # Asleep no longer than until the end, though no slot is due before it (paused).
    assert first._sleep() <= 1.0

    clock.now = until + timedelta(milliseconds=10)
    second.tick_at(clock.now)
    first.tick_at(clock.now)
    stored = Job.objects.get(pk=job.pk)
    assert (stored.enabled, stored.paused_by, stored.pause_reason, stored.paused_until) == (
        True, "", "", None
    )  # fmt: skip
    (resumed,) = _audit(AuditAction.RESUME)
    assert resumed.actor == "code:automatic resume"
    assert resumed.before == {
        "enabled": False,
        "paused_by": "code:operator",
        "pause_reason": "deploy",
        "paused_until": until.isoformat(),
    }
    # As after any resume: no slot owed for the paused time (up to the resume, which this
    # test makes before ``until`` by the real clock), the next ones fire.
    for step in range(1, 4):
        clock.now = until + timedelta(seconds=10 * step)
        first.tick_at(clock.now)
    slots = list(JobRun.objects.filter(job=job).values_list("scheduled_for", flat=True))
    assert slots and min(slots) > stored.updated_at


@pytest.mark.django_db(transaction=True)
def test_a_pause_changed_before_its_end_is_not_resumed(make_job: Callable[..., Job]) -> None:
    make_job("report")
    until = _pause("report", until="30s").paused_until
    assert until is not None
    _pause("report", "for good")  # no end now
    ended = pause_ends.resume_ended(until + timedelta(seconds=1))
    assert (ended.resumed, ended.next_end) == ([], None)
    assert not Job.objects.get(name="report").enabled


@pytest.mark.django_db(transaction=True)
def test_an_idle_tick_reads_no_pause_end_until_a_job_changes_or_the_end_comes(
    make_job: Callable[..., Job], redis_broker: redis.Redis
) -> None:
    """The tick is the beat's hot path: the ends are read again only when a job changed (a
    pause is a change) or the soonest end came, not once more every tick."""
    make_job("report", schedule=Every(3600), queue=QUEUE)
    clock = VirtualClock(database_now())
    beat = _beat(clock)
    beat.tick_at(clock.now)

    def reads_pause_ends(at: datetime) -> bool:
        with CaptureQueriesContext(connection) as tick:
            beat.tick_at(at)
        return any('"paused_until" IS NOT NULL' in query["sql"] for query in tick.captured_queries)

    assert not reads_pause_ends(clock.now + timedelta(seconds=1))
    until = _pause("report", "deploy", "30s").paused_until
    assert until is not None
    assert reads_pause_ends(until - timedelta(seconds=2))  # the pause: a change
    assert not reads_pause_ends(until - timedelta(seconds=1))
    assert reads_pause_ends(until)  # its end came
    assert Job.objects.get(name="report").enabled
