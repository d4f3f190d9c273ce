"""Maintenance's sweeps of scheduled runs (jobs.upkeep.sweeps) against real PostgreSQL: a run
past its start deadline is recorded missed once; a run whose message never went out, or went out
long ago and is still waiting, is taken for publishing again, oldest slot first, and stamped so
the next pass leaves it alone; the backlog counts per queue only messages sent before the
reading. A continuous tenure is never any sweep's business."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import Job, JobRun, RunStatus, Trigger
from jobs.upkeep import sweeps

pytestmark = pytest.mark.django_db


def _run(
    job: Job, *, slot_ago: float, sent_ago: float | None, trigger: str = Trigger.SCHEDULED
) -> JobRun:
    """A scheduled run of ``job`` for the slot ``slot_ago`` s ago, made then, whose message went
    out ``sent_ago`` s ago (``None``: never)."""
    now = timezone.now()
    run = JobRun.objects.create(
        job=job, scheduled_for=now - timedelta(seconds=slot_ago), trigger=trigger
    )
    sent = None if sent_ago is None else now - timedelta(seconds=sent_ago)
    JobRun.objects.filter(pk=run.pk).update(
        created_at=now - timedelta(seconds=slot_ago), dispatched_at=sent
    )
    return run


def test_a_run_past_its_start_deadline_is_recorded_missed_once(
    make_job: Callable[..., Job],
) -> None:
    job = make_job(start_deadline=60)
    late = _run(job, slot_ago=120, sent_ago=119)
    in_time = _run(job, slot_ago=30, sent_ago=29)
    assert sweeps.expire_scheduled() == [late.pk]
    assert sweeps.expire_scheduled() == []
    late.refresh_from_db()
    assert late.status == RunStatus.MISSED
    assert "start deadline of 60 s" in late.error and late.finished_at is not None
    assert JobRun.objects.get(pk=in_time.pk).status == RunStatus.SCHEDULED


def test_a_continuous_tenure_is_no_sweeps_business(make_job: Callable[..., Job]) -> None:
    job = make_job(start_deadline=60)
    tenure = _run(job, slot_ago=600, sent_ago=None, trigger=Trigger.CONTINUOUS)
    assert sweeps.expire_scheduled() == []
    assert sweeps.take_stranded(0, 100, sent=False) == []
    assert JobRun.objects.get(pk=tenure.pk).status == RunStatus.SCHEDULED


def test_never_sent_runs_are_taken_oldest_first_and_stamped(make_job: Callable[..., Job]) -> None:
    job = make_job(start_deadline=3600)
    newer = _run(job, slot_ago=100, sent_ago=None)
    older = _run(job, slot_ago=200, sent_ago=None)
    recent = _run(job, slot_ago=5, sent_ago=None)  # within ``after``: its beat may still send it
    sent = _run(job, slot_ago=300, sent_ago=250)
    taken = sweeps.take_stranded(60, 1, sent=False)
    assert [run.run_id for run in taken] == [older.pk]
    assert [run.run_id for run in sweeps.take_stranded(60, 10, sent=False)] == [newer.pk]
    assert sweeps.take_stranded(60, 10, sent=False) == []  # stamped: left alone now
    assert JobRun.objects.get(pk=recent.pk).dispatched_at is None
    assert [run.run_id for run in sweeps.take_stranded(60, 10, sent=True)] == [sent.pk]


def test_sent_runs_are_taken_by_queue(make_job: Callable[..., Job]) -> None:
    a = make_job("a", queue="qa", start_deadline=3600)
    b = make_job("b", queue="qb", start_deadline=3600)
    run_a = _run(a, slot_ago=300, sent_ago=200)
    _run(b, slot_ago=300, sent_ago=200)
    taken = sweeps.take_stranded(60, 10, sent=True, queue="qa")
    assert [run.run_id for run in taken] == [run_a.pk]


def test_the_backlog_counts_per_queue_what_was_sent_before_the_reading(
    make_job: Callable[..., Job],
) -> None:
    a = make_job("a", queue="qa", start_deadline=3600)
    b = make_job("b", queue="qb", start_deadline=3600)
    _run(a, slot_ago=300, sent_ago=200)  # stranded
    _run(a, slot_ago=20, sent_ago=10)  # sent, not stranded yet
    _run(a, slot_ago=300, sent_ago=None)  # never sent: not the depth's business
    _run(b, slot_ago=20, sent_ago=10)  # a queue with nothing stranded is left out
    read_at, backlogs = sweeps.sent_backlog(60)
    assert read_at is not None
    assert [(q.queue, q.stranded, q.sent) for q in backlogs] == [("qa", 1, 2)]
    # Only the messages that went out before a given instant.
    _, before = sweeps.sent_backlog(60, published_before=timezone.now() - timedelta(seconds=100))
    assert [(q.queue, q.stranded, q.sent) for q in before] == [("qa", 1, 1)]
    assert sweeps.sent_backlog(3600) == (None, [])
