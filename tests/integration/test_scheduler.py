"""The cluster scheduler against real PostgreSQL and the real broker, with an injected clock.

Beat time runs an hour behind the database's clock here, so that the database clock (which
catch-up trusts) is never in the beat's past; edits made by the test itself happen "after" the
beat's now and are therefore owed nothing, like an edit made a moment before a beat starts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import OperationalError, connection
from django.utils import timezone
from django_celery_beat.models import ClockedSchedule

from jobs import services
from jobs.audit import Actor
from jobs.beat import slot_records
from jobs.beat.scheduler import ClusterScheduler
from jobs.models import Job, JobRun, RunStatus, ScheduleChange
from jobs.schedule.catchup import MAX_MISSED_RECORDED
from jobs.schedule.kinds import At, Every
from project.celery import app
from tests.support.virtual_clock import VirtualClock

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "tests-beat"


@pytest.fixture
def clock() -> VirtualClock:
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(hours=1)
    return VirtualClock(start)


def _beat(clock: Callable[[], datetime]) -> ClusterScheduler:
    return ClusterScheduler(app=app, clock=clock, maintain=False)


def _tick(beat: ClusterScheduler, now: datetime) -> None:
    beat.tick_at(now)


def _slots(job: Job) -> list[datetime]:
    return sorted(JobRun.objects.filter(job=job).values_list("scheduled_for", flat=True))


def _backdate(job: Job, when: datetime) -> None:
    """Pretend the job was created or last edited at ``when``."""
    Job.objects.filter(pk=job.pk).update(updated_at=when)


def test_two_beats_firing_the_same_slot_create_one_run_and_one_message(
    make_job: Callable[..., Job], redis_broker: redis.Redis, clock: VirtualClock
) -> None:
    job = make_job(schedule=Every(10), queue=QUEUE)
    first, second = _beat(clock), _beat(clock)
    slot = clock.now + timedelta(seconds=10)
    for beat in (first, second):
        _tick(beat, slot + timedelta(milliseconds=5))
        _tick(beat, slot + timedelta(seconds=10, milliseconds=5))
    assert _slots(job) == [slot, slot + timedelta(seconds=10)]
    assert redis_broker.llen(QUEUE) == 2


def test_all_due_slots_of_a_tick_go_out_in_one_pass(
    make_job: Callable[..., Job], redis_broker: redis.Redis, clock: VirtualClock
) -> None:
    for n in range(25):
        make_job(f"j{n}", schedule=Every(5), queue=QUEUE)
    beat = _beat(clock)
    _tick(beat, clock.now + timedelta(seconds=5))
    assert JobRun.objects.filter(scheduled_for=clock.now + timedelta(seconds=5)).count() == 25
    assert redis_broker.llen(QUEUE) == 25
    assert not JobRun.objects.filter(dispatched_at__isnull=True).exists()


def test_edits_are_picked_up_on_the_next_tick_by_reading_only_the_edited_jobs(
    make_job: Callable[..., Job],
    redis_broker: redis.Redis,
    clock: VirtualClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for n in range(30):
        make_job(f"other{n}", schedule=Every(3600), queue=QUEUE)
    paused = make_job("paused", schedule=Every(10), queue=QUEUE)
    rescheduled = make_job("rescheduled", schedule=Every(10), queue=QUEUE)
    removed = make_job("removed", schedule=Every(10), queue=QUEUE)
    beat = _beat(clock)
    reads: list[object] = []
    original = beat._read_jobs

    def counting(ids: object = None) -> object:
        reads.append(ids)
        return original(ids)  # type: ignore[arg-type]

    monkeypatch.setattr(beat, "_read_jobs", counting)

    services.pause(paused.name, actor=Actor.code("tests"))
    services.save_job(Job.objects.get(pk=rescheduled.pk), Every(20), actor=Actor.code("tests"))
    services.remove(removed.name, actor=Actor.code("tests"))
    added = make_job("added", schedule=Every(10), queue=QUEUE)
    _tick(beat, clock.now + timedelta(seconds=1))
    assert reads == [{paused.pk, rescheduled.pk, removed.pk, added.pk}]  # not all 34 jobs

    for step in range(1, 7):
        _tick(beat, clock.now + timedelta(seconds=10 * step))
    assert _slots(paused) == [] and _slots(removed) == []
    assert [s - clock.now for s in _slots(rescheduled)] == [
        timedelta(seconds=20 * i) for i in (1, 2, 3)
    ]
    assert len(_slots(added)) == 6
    reads.clear()
    _tick(beat, clock.now + timedelta(seconds=61))
    assert reads == []  # an idle tick reads no job


def test_bulk_updates_and_raw_sql_reach_the_change_log(make_job: Callable[..., Job]) -> None:
    job = make_job(schedule=Every(10))
    before = ScheduleChange.objects.count()
    Job.objects.filter(pk=job.pk).update(start_deadline=77)  # no signal, no save()
    with connection.cursor() as cursor:
        cursor.execute("UPDATE jobs_job SET queue = 'elsewhere' WHERE id = %s", [job.pk])
        cursor.execute(
            "UPDATE django_celery_beat_intervalschedule SET every = every WHERE id = %s",
            [job.periodic_task.interval_id],  # type: ignore[union-attr]
        )  # a no-op update logs nothing
    assert list(ScheduleChange.objects.values_list("job_id", flat=True)[before:]) == [job.pk] * 2


def test_a_shared_schedule_row_edit_reaches_every_job_using_it(
    make_job: Callable[..., Job],
) -> None:
    jobs = [make_job(f"j{n}", schedule=Every(10)) for n in range(3)]
    interval = jobs[0].periodic_task.interval  # type: ignore[union-attr]
    before = ScheduleChange.objects.count()
    interval.every = 11
    interval.save()
    logged = set(ScheduleChange.objects.values_list("job_id", flat=True)[before:])
    assert logged == {job.pk for job in jobs}


@pytest.mark.parametrize("offset", [-0.45, -0.2, 0.2, 0.45])
def test_clock_skew_below_half_the_interval_changes_no_slot(
    make_job: Callable[..., Job], redis_broker: redis.Redis, clock: VirtualClock, offset: float
) -> None:
    """Three beats, one exact, one skewed by ``offset`` intervals, one by half that the other
    way, tick at jittered instants: every slot of the window has exactly one record."""
    interval = 4
    job = make_job(schedule=Every(interval), queue=QUEUE)
    start = clock.now
    beats = [
        _beat(clock),
        _beat(clock.shifted(offset * interval)),
        _beat(clock.shifted(-offset * interval / 2)),
    ]
    jitter = [0.0, 0.13, 0.77, 1.9, 2.6, 3.3, 3.95]
    for step in range(60):
        clock.now = start + timedelta(seconds=step * interval / 7 + jitter[step % 7] / 7)
        for beat in beats:
            _tick(beat, beat._clock())
    clock.now = start + timedelta(seconds=60 * interval / 7)
    slots = _slots(job)
    # The beat whose clock is behind also fires `start` itself, which the others count as past.
    assert slots[0] in (start, start + timedelta(seconds=interval))
    grid = [slots[0] + timedelta(seconds=interval * i) for i in range(len(slots))]
    assert slots == grid  # on the grid, no gaps, none twice, none extra
    assert slots[-1] >= clock.now - timedelta(seconds=interval)
    assert redis_broker.llen(QUEUE) == len(slots)


def _run_at(job: Job, slot: datetime, status: RunStatus = RunStatus.SUCCEEDED) -> None:
    JobRun.objects.create(job=job, scheduled_for=slot, status=status)


def test_start_up_after_every_beat_was_down_applies_the_catch_up_policies(
    make_job: Callable[..., Job], redis_broker: redis.Redis, clock: VirtualClock
) -> None:
    latest = make_job("latest", schedule=Every(10), queue=QUEUE, catch_up="latest")
    none = make_job("none", schedule=Every(10), queue=QUEUE, catch_up="none")
    stale = make_job("stale", schedule=Every(10), queue=QUEUE, start_deadline=3)
    outage_began = clock.now - timedelta(seconds=65)
    for job in (latest, none, stale):
        _backdate(job, clock.now - timedelta(hours=1))
        _run_at(job, outage_began - timedelta(seconds=5))  # the last slot before the outage
    start = clock.now
    clock.now += timedelta(seconds=6)  # beats come back 6 s after the slot at `start`
    _beat(clock)  # start-up: catch-up happens here

    owed = [outage_began + timedelta(seconds=5 + 10 * i) for i in range(7)]
    assert owed[-1] == start
    for job in (latest, none, stale):
        runs = list(
            JobRun.objects.filter(job=job, scheduled_for__gte=owed[0]).order_by("scheduled_for")
        )
        assert [run.scheduled_for for run in runs] == owed, job.name
        assert all(run.status == RunStatus.MISSED for run in runs[:-1])
        assert all("no beat was running" in run.error for run in runs[:-1])
    newest = {
        job.name: JobRun.objects.get(job=job, scheduled_for=owed[-1])
        for job in (latest, none, stale)
    }
    assert newest["latest"].status == RunStatus.SCHEDULED  # runs, 6 s late, within its deadline
    assert newest["none"].status == RunStatus.MISSED  # 6 s late: not current (grace 5 s)
    assert newest["stale"].status == RunStatus.MISSED  # 6 s late: past its 3 s deadline
    assert "past its start deadline of 3 s" in newest["stale"].error
    assert redis_broker.llen(QUEUE) == 1


def test_start_up_runs_a_none_job_s_current_slot(
    make_job: Callable[..., Job], redis_broker: redis.Redis, clock: VirtualClock
) -> None:
    job = make_job(schedule=Every(60), queue=QUEUE, catch_up="none")
    _backdate(job, clock.now - timedelta(hours=1))
    _run_at(job, clock.now - timedelta(minutes=3))
    clock.now += timedelta(seconds=2)  # the slot at clock.now - 2 s is current (grace 5 s)
    _beat(clock)
    statuses = dict(JobRun.objects.filter(job=job).values_list("scheduled_for", "status"))
    assert statuses == {
        clock.now - timedelta(minutes=3, seconds=2): RunStatus.SUCCEEDED,
        clock.now - timedelta(minutes=2, seconds=2): RunStatus.MISSED,
        clock.now - timedelta(minutes=1, seconds=2): RunStatus.MISSED,
        clock.now - timedelta(seconds=2): RunStatus.SCHEDULED,
    }


def test_catch_up_after_a_long_outage_records_at_most_a_thousand_slots(
    make_job: Callable[..., Job], redis_broker: redis.Redis, clock: VirtualClock
) -> None:
    job = make_job(schedule=Every(1), queue=QUEUE)
    _backdate(job, clock.now - timedelta(days=2))
    _run_at(job, clock.now - timedelta(hours=2))
    _beat(clock)
    runs = list(
        JobRun.objects.filter(job=job, status__in=["missed", "scheduled"]).order_by("scheduled_for")
    )
    assert len(runs) == MAX_MISSED_RECORDED
    assert runs[-1].scheduled_for == clock.now and runs[-1].status == RunStatus.SCHEDULED
    assert "and 6200 earlier slot(s)" in runs[0].error


def test_slots_before_the_last_edit_are_not_owed(
    make_job: Callable[..., Job], redis_broker: redis.Redis, clock: VirtualClock
) -> None:
    job = make_job(schedule=Every(10), queue=QUEUE)
    _run_at(job, clock.now - timedelta(hours=1))
    _backdate(job, clock.now - timedelta(seconds=25))  # resumed 25 s ago, beats down since
    _beat(clock)
    slots = [s - clock.now for s in _slots(job)]
    assert slots == [
        timedelta(hours=-1),
        timedelta(seconds=-20),
        timedelta(seconds=-10),
        timedelta(0),
    ]


def _one_off(make_job: Callable[..., Job], name: str, when: datetime) -> Job:
    """A one-off job whose time is ``when``, already past: made for later (a time already past
    its start deadline is refused), then moved back, as time passing while no beat ran leaves
    it."""
    job = make_job(name, schedule=At(timezone.now() + timedelta(hours=1)), queue=QUEUE)
    ClockedSchedule.objects.filter(periodictask__job=job).update(clocked_time=when)
    return job


def test_a_one_off_that_passed_while_no_beat_ran_is_recorded(
    make_job: Callable[..., Job], redis_broker: redis.Redis, clock: VirtualClock
) -> None:
    soon = _one_off(make_job, "soon", clock.now - timedelta(seconds=30))
    long_ago = _one_off(make_job, "long-ago", clock.now - timedelta(hours=2))
    _beat(clock)
    assert JobRun.objects.get(job=soon).status == RunStatus.SCHEDULED
    missed = JobRun.objects.get(job=long_ago)
    assert missed.status == RunStatus.MISSED and "past its start deadline" in missed.error


def test_a_beat_that_fell_behind_applies_the_policy_and_keeps_other_beats_records(
    make_job: Callable[..., Job], redis_broker: redis.Redis, clock: VirtualClock
) -> None:
    job = make_job(schedule=Every(10), queue=QUEUE, start_deadline=30)
    stalled, live = _beat(clock), _beat(clock)
    start = clock.now
    _tick(stalled, start + timedelta(seconds=10))
    for step in range(2, 6):  # the live beat fires 20..50 s while the other one is stopped
        _tick(live, start + timedelta(seconds=10 * step))
    _tick(stalled, start + timedelta(seconds=93))  # wakes 83 s late, alone now
    statuses = {
        s - start: status
        for s, status in JobRun.objects.filter(job=job).values_list("scheduled_for", "status")
    }
    assert [statuses[timedelta(seconds=10 * i)] for i in range(1, 6)] == [RunStatus.SCHEDULED] * 5
    assert [statuses[timedelta(seconds=10 * i)] for i in range(6, 9)] == [RunStatus.MISSED] * 3
    assert statuses[timedelta(seconds=90)] == RunStatus.SCHEDULED
    assert len(statuses) == 9
    _tick(stalled, start + timedelta(seconds=100))
    assert JobRun.objects.filter(job=job).count() == 10


@contextlib.contextmanager
def _insert_cut(monkeypatch: pytest.MonkeyPatch, *, committed: bool) -> Iterator[None]:
    """Within the block, the beat's insert of slots fails as a broken connection does: after
    (``committed``) or instead of reaching the database."""
    original = slot_records.insert_scheduled

    def cut(pairs: Any, **kwargs: Any) -> Any:
        if committed:
            original(pairs, **kwargs)
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(slot_records, "insert_scheduled", cut)
    try:
        yield
    finally:
        monkeypatch.setattr(slot_records, "insert_scheduled", original)


@pytest.fixture
def cut_first_insert(
    make_job: Callable[..., Job], clock: VirtualClock, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., tuple[Job, ClusterScheduler]]:
    """A job every 10 s, and a beat whose tick at its slot 10 s on failed, the insert cut
    (see ``_insert_cut``)."""

    def cut(*, committed: bool) -> tuple[Job, ClusterScheduler]:
        job = make_job(schedule=Every(10), queue=QUEUE)
        beat = _beat(clock)
        with _insert_cut(monkeypatch, committed=committed), pytest.raises(OperationalError):
            _tick(beat, clock.now + timedelta(seconds=10))
        return job, beat

    return cut


def test_a_failed_insert_loses_no_slot(
    cut_first_insert: Callable[..., tuple[Job, ClusterScheduler]],
    redis_broker: redis.Redis,
    clock: VirtualClock,
) -> None:
    job, beat = cut_first_insert(committed=False)
    _tick(beat, clock.now + timedelta(seconds=11))
    assert _slots(job) == [clock.now + timedelta(seconds=10)]


def test_an_insert_that_committed_unseen_is_published_when_recorded_again(
    cut_first_insert: Callable[..., tuple[Job, ClusterScheduler]],
    redis_broker: redis.Redis,
    clock: VirtualClock,
) -> None:
    """A broken connection cut the insert's reply after its commit: the next tick's insert
    creates nothing, yet the run goes out now rather than after JOBS_REPUBLISH_AFTER."""
    job, beat = cut_first_insert(committed=True)
    assert redis_broker.llen(QUEUE) == 0
    _tick(beat, clock.now + timedelta(seconds=11))
    assert _slots(job) == [clock.now + timedelta(seconds=10)]
    assert redis_broker.llen(QUEUE) == 1
    _tick(beat, clock.now + timedelta(seconds=12))  # settled: not published again
    assert redis_broker.llen(QUEUE) == 1 and len(beat._uncertain) == 0


def test_an_uncertain_slot_another_beat_claimed_meanwhile_is_not_published(
    cut_first_insert: Callable[..., tuple[Job, ClusterScheduler]],
    redis_broker: redis.Redis,
    clock: VirtualClock,
) -> None:
    job, beat = cut_first_insert(committed=False)
    other = _beat(clock)  # won the slot and published it; a worker took it
    _tick(other, clock.now + timedelta(seconds=10, milliseconds=5))
    assert redis_broker.llen(QUEUE) == 1
    JobRun.objects.filter(job=job).update(status=RunStatus.RUNNING)
    _tick(beat, clock.now + timedelta(seconds=11))
    assert redis_broker.llen(QUEUE) == 1 and len(beat._uncertain) == 0


def test_start_up_is_one_pass_for_many_jobs(
    make_job: Callable[..., Job], redis_broker: redis.Redis, clock: VirtualClock
) -> None:
    for n in range(40):
        make_job(f"j{n}", schedule=Every(60 * (1 + n % 3)), queue=QUEUE)
    beat = _beat(clock)
    assert len(beat._entries) == 40
    assert all(entry.due is not None and entry.due > clock.now for entry in beat._entries.values())


def test_the_banner_s_maxinterval_is_the_scheduler_s_real_longest_sleep(
    clock: VirtualClock,
) -> None:
    """``celery beat -l info`` prints ``scheduler.max_interval`` as "maxinterval": it must be
    JOBS_BEAT_MAX_INTERVAL, the sleep the beat really caps at, not Celery's 5-minute default."""
    beat = ClusterScheduler(app=app, clock=clock, maintain=False, max_interval=300)
    assert beat.max_interval == settings.JOBS_BEAT_MAX_INTERVAL != 300
    assert beat.tick_at(clock.now) <= settings.JOBS_BEAT_MAX_INTERVAL


def test_a_coalescing_job_skips_its_slots_while_its_previous_run_waits_in_the_queue(
    make_job: Callable[..., Job], redis_broker: redis.Redis, clock: VirtualClock
) -> None:
    coalescing = make_job("coalescing", schedule=Every(10), queue=QUEUE, coalesce=True)
    piling = make_job("piling", schedule=Every(10), queue=QUEUE)
    beat = _beat(clock)
    slots = [clock.now + timedelta(seconds=10 * n) for n in (1, 2, 3)]
    for slot in slots:  # no worker takes anything meanwhile
        _tick(beat, slot + timedelta(milliseconds=5))
    first, *later = JobRun.objects.filter(job=coalescing).order_by("scheduled_for")
    assert first.status == RunStatus.SCHEDULED
    assert [(run.status, run.error) for run in later] == [
        (RunStatus.SKIPPED, f"coalesced: run {first.pk} of this job still waits in its queue")
    ] * 2
    assert JobRun.objects.filter(job=piling, status=RunStatus.SCHEDULED).count() == 3
    assert redis_broker.llen(QUEUE) == 1 + 3, (
        "one message for the coalescing job, three for the other"
    )
    # Once a worker took the queued run, the next slot goes out again.
    JobRun.objects.filter(pk=first.pk).update(status=RunStatus.RUNNING)
    _tick(beat, slots[-1] + timedelta(seconds=10, milliseconds=5))
    assert JobRun.objects.filter(job=coalescing).latest("scheduled_for").status == "scheduled"
    assert redis_broker.llen(QUEUE) == 1 + 4 + 1
