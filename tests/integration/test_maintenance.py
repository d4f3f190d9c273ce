"""Maintenance against real PostgreSQL and Redis: stranded runs re-published once, expired ones
recorded missed, one pass at a time."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.db.models import F
from django.utils import timezone

from jobs.beat import slot_records
from jobs.broker import dispatch, messages
from jobs.guard import lease
from jobs.models import Job, JobRun, RunStatus, Trigger
from jobs.schedule.kinds import Every
from jobs.upkeep import maintenance

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "tests-maintenance"


def _run(job: Job, *, age: float, dispatched: float | None, trigger: str = "scheduled") -> JobRun:
    """A scheduled run whose slot was ``age`` s ago, its message sent ``dispatched`` s ago."""
    now = timezone.now()
    run = JobRun.objects.create(
        job=job,
        scheduled_for=now - timedelta(seconds=age),
        trigger=trigger,
        dispatched_at=None if dispatched is None else now - timedelta(seconds=dispatched),
    )
    JobRun.objects.filter(pk=run.pk).update(created_at=F("scheduled_for"))
    return run


def _pass(**kwargs: object) -> maintenance.PassReport | None:
    return maintenance.run_pass(holder="test-holder", republish_after=10, **kwargs)  # type: ignore[arg-type]


def test_stranded_runs_are_republished_once_and_fresh_ones_left_alone(
    make_job: Callable[..., Job], redis_broker: redis.Redis
) -> None:
    job = make_job(schedule=Every(60), queue=QUEUE, start_deadline=600)
    stranded = _run(job, age=60, dispatched=30)  # its message was lost, e.g. a Redis flush
    never_sent = _run(job, age=120, dispatched=None)  # its beat died before publishing
    fresh = _run(job, age=5, dispatched=5)  # probably still in the queue
    future_retry = _run(job, age=-30, dispatched=40, trigger=Trigger.RETRY)  # held until then
    before = dict(JobRun.objects.values_list("pk", "dispatched_at"))
    report = _pass()
    assert report is not None and report.republished == 2
    assert redis_broker.llen(QUEUE) == 2
    after = dict(JobRun.objects.values_list("pk", "dispatched_at"))
    changed = {pk for pk in after if after[pk] != before[pk]}
    assert changed == {stranded.pk, never_sent.pk}  # stamped: the next pass waits again
    assert fresh.pk not in changed and future_retry.pk not in changed

    report = _pass()  # right away again: nothing is due for re-publishing yet
    assert report is not None and report.republished == 0
    assert redis_broker.llen(QUEUE) == 2
    assert JobRun.objects.filter(status=RunStatus.SCHEDULED).count() == 4


def _sent(job: Job, count: int, *, age: float) -> list[JobRun]:
    """``count`` due runs whose messages went out ``age`` s ago and still wait in the queue."""
    runs = [_run(job, age=age + n, dispatched=age) for n in range(count)]
    for run in runs:
        messages.publish(job, run.pk, run.scheduled_for)
    return runs


def test_runs_whose_messages_still_wait_in_their_queue_are_not_republished(
    make_job: Callable[..., Job], redis_broker: redis.Redis
) -> None:
    # The workers are stopped or busy: every message is still queued, however old.
    job = make_job(schedule=Every(60), queue=QUEUE, start_deadline=600)
    _sent(job, 3, age=60)
    report = _pass()
    assert report is not None and report.republished == 0
    assert redis_broker.llen(QUEUE) == 3


def test_a_queue_short_of_messages_gets_only_the_missing_ones_oldest_first(
    make_job: Callable[..., Job], redis_broker: redis.Redis
) -> None:
    job = make_job(schedule=Every(60), queue=QUEUE, start_deadline=600)
    runs = _sent(job, 5, age=60)
    for _ in range(2):  # the two oldest messages: a worker holds them unclaimed, or they were lost
        assert redis_broker.rpop(QUEUE) is not None
    fresh = _sent(job, 1, age=1)[0]  # sent just now: counted as queued, never re-published
    before = dict(JobRun.objects.values_list("pk", "dispatched_at"))
    report = _pass()
    assert report is not None and report.republished == 2
    assert redis_broker.llen(QUEUE) == 6
    after = dict(JobRun.objects.values_list("pk", "dispatched_at"))
    oldest_two = sorted(runs, key=lambda run: run.scheduled_for)[:2]
    assert {pk for pk in after if after[pk] != before[pk]} == {run.pk for run in oldest_two}
    assert fresh.pk not in {pk for pk in after if after[pk] != before[pk]}


def test_messages_on_their_way_or_taken_while_the_queue_is_read_are_never_counted_missing(
    make_job: Callable[..., Job], redis_broker: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The readings of the runs and of the queue cannot be taken at one instant. Whatever
    happens between them, a message that is in the queue, or on its way to it, or that a worker
    took and claimed, gets no copy: only a lost one (or one a worker holds unclaimed) would."""
    job = make_job(schedule=Every(60), queue=QUEUE, start_deadline=600)
    queued = _sent(job, 3, age=60)  # stranded, their messages all still queued
    # A beat recorded this slot and had not published it yet when the pass began.
    recorded = _run(job, age=0, dispatched=None)
    real_depths = maintenance.queue_depth.waiting_messages

    def depths_while_the_cluster_moves(connection: object, queues: list[str]) -> object:
        # Just before the depth is read, a worker takes the oldest message and claims its run.
        assert redis_broker.rpop(QUEUE) is not None
        JobRun.objects.filter(pk=queued[0].pk).update(status=RunStatus.RUNNING)
        depths = real_depths(connection, queues)
        # Right after: that beat publishes its run and stamps it, and another beat records,
        # publishes and stamps a new slot.
        for run in (recorded, _run(job, age=0, dispatched=None)):
            messages.publish(job, run.pk, run.scheduled_for)
            slot_records.mark_published([run.pk])
        return depths

    monkeypatch.setattr(maintenance.queue_depth, "waiting_messages", depths_while_the_cluster_moves)
    report = _pass()
    assert report is not None and report.republished == 0
    assert redis_broker.llen(QUEUE) == 4  # two of the stranded runs' and the two new ones'


def test_only_runs_whose_messages_went_out_are_stamped_sent(
    make_job: Callable[..., Job], redis_broker: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dispatched_at says the message went out (the beat stamps what ``published`` names): a
    run whose publish failed stays unstamped, a never-sent run for maintenance, which publishes
    it regardless of its queue's depth."""
    job = make_job(schedule=Every(60), queue=QUEUE, start_deadline=600)
    out, failing = _run(job, age=1, dispatched=None), _run(job, age=1, dispatched=None)

    def publish(job: Job, run_id: int, *args: Any, **kwargs: Any) -> None:
        if run_id == failing.pk:
            raise ConnectionError("the broker went away")
        real_publish(job, run_id, *args, **kwargs)

    real_publish = messages.publish
    monkeypatch.setattr(messages, "publish", publish)
    with dispatch.publishing() as publisher:
        publisher.add([(job, out.pk, out.scheduled_for), (job, failing.pk, failing.scheduled_for)])
    assert publisher.published == [out.pk]
    slot_records.mark_published(publisher.published)
    stamped = dict(JobRun.objects.values_list("pk", "dispatched_at"))
    assert stamped[out.pk] is not None and stamped[failing.pk] is None
    assert redis_broker.llen(QUEUE) == 1


def test_runs_past_their_deadline_are_recorded_missed_not_republished(
    make_job: Callable[..., Job], redis_broker: redis.Redis
) -> None:
    job = make_job(schedule=Every(60), queue=QUEUE, start_deadline=30)
    late = _run(job, age=45, dispatched=45)
    report = _pass()
    assert report is not None and report.expired == 1 and report.republished == 0
    late.refresh_from_db()
    assert late.status == RunStatus.MISSED
    assert "start deadline of 30 s" in late.error and late.finished_at is not None
    assert redis_broker.llen(QUEUE) == 0


@pytest.mark.parametrize("trigger", [Trigger.CALL, Trigger.UPSTREAM])
def test_calls_and_downstream_runs_whose_message_was_lost_are_republished_then_missed(
    make_job: Callable[..., Job], redis_broker: redis.Redis, trigger: str
) -> None:
    """Found by the nemesis (seed 7, docs/nemesis.md): a guarded call's run and a downstream
    run whose message a broker flush lost stayed scheduled for ever, neither re-published nor
    recorded missed. They are looked after as every other run but a continuous tenure."""
    job = make_job(schedule=Every(60), queue=QUEUE, start_deadline=600)
    stranded = _run(job, age=60, dispatched=30, trigger=trigger)
    never_sent = _run(job, age=120, dispatched=None, trigger=trigger)
    report = _pass()
    assert report is not None and report.republished == 2
    assert redis_broker.llen(QUEUE) == 2
    assert set(JobRun.objects.values_list("pk", flat=True).filter(dispatched_at__gt=timezone.now()
               - timedelta(seconds=5))) == {stranded.pk, never_sent.pk}  # fmt: skip

    late = _run(make_job("late", schedule=Every(60), queue=QUEUE, start_deadline=30),
                age=45, dispatched=45, trigger=trigger)  # fmt: skip
    # An upstream's run counts its deadline from its creation (its slot is its upstream's).
    JobRun.objects.filter(pk=late.pk).update(created_at=timezone.now() - timedelta(seconds=45))
    report = _pass()
    assert report is not None and report.expired == 1
    late.refresh_from_db()
    assert late.status == RunStatus.MISSED and "start deadline of 30 s" in late.error


def test_one_pass_at_a_time(make_job: Callable[..., Job], redis_broker: redis.Redis) -> None:
    job = make_job(schedule=Every(60), queue=QUEUE, start_deadline=600)
    _run(job, age=60, dispatched=60)
    held = lease.acquire(maintenance.LEASE_KEY, "another-beat", 30)
    assert held is not None
    assert _pass() is None
    assert redis_broker.llen(QUEUE) == 0
    lease.release(held)
    report = _pass()
    assert report is not None and report.republished == 1
    assert lease.current_holder(maintenance.LEASE_KEY) is None  # given back after the pass


def test_the_loop_runs_passes_in_the_background_until_stopped(
    make_job: Callable[..., Job], redis_broker: redis.Redis
) -> None:
    from project.celery import app

    job = make_job(schedule=Every(60), queue=QUEUE, start_deadline=30)
    late = _run(job, age=45, dispatched=45)
    loop = maintenance.MaintenanceLoop(interval=0.05, republish_after=10)
    loop.start(app)
    try:
        deadline = time.monotonic() + 20
        while JobRun.objects.get(pk=late.pk).status != RunStatus.MISSED:
            assert time.monotonic() < deadline, "the loop never ran a pass"
            time.sleep(0.05)
    finally:
        loop.stop()
    assert not loop._thread.is_alive()
