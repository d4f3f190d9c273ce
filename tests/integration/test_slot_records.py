"""The beat's statements about slots (jobs.beat.slot_records) against real PostgreSQL: a slot's
first record wins and its repeats create nothing, a calendar's or a blackout's slot is recorded
skipped, slots nobody fired are recorded missed once, the newest slot on record and the
database clock are read together, and the published stamp is set once."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from jobs.beat import slot_records
from jobs.models import Blackout, Job, JobRun, RunStatus, Trigger

pytestmark = pytest.mark.django_db


def _slot(seconds_ago: int = 0) -> datetime:
    return timezone.now().replace(microsecond=0) - timedelta(seconds=seconds_ago)


def test_the_first_insert_of_a_slot_wins_and_repeats_create_nothing(
    make_job: Callable[..., Job],
) -> None:
    a, b = make_job("a"), make_job("b")
    slot = _slot()
    first = slot_records.insert_scheduled([(a.pk, slot), (b.pk, slot)])
    again = slot_records.insert_scheduled([(a.pk, slot), (b.pk, slot)])
    assert {run.job_id for run in first} == {a.pk, b.pk}
    assert {run.status for run in first} == {RunStatus.SCHEDULED}
    assert again == []
    assert JobRun.objects.filter(scheduled_for=slot).count() == 2


def test_manual_runs_may_share_a_slot_with_the_scheduled_one(make_job: Callable[..., Job]) -> None:
    job = make_job()
    slot = _slot()
    slot_records.insert_scheduled([(job.pk, slot)])
    JobRun.objects.create(job=job, scheduled_for=slot, trigger=Trigger.MANUAL)
    assert JobRun.objects.filter(job=job).count() == 2


def test_a_slot_the_calendar_skips_is_recorded_skipped_with_its_reason(
    make_job: Callable[..., Job],
) -> None:
    kept, skipped = make_job("kept"), make_job("skipped")
    slot = _slot()
    made = slot_records.insert_scheduled(
        [(kept.pk, slot), (skipped.pk, slot)], reasons=["", "calendar: a holiday"]
    )
    assert {run.job_id: run.status for run in made} == {
        kept.pk: RunStatus.SCHEDULED,
        skipped.pk: RunStatus.SKIPPED,
    }
    run = JobRun.objects.get(job=skipped)
    assert run.error == "calendar: a holiday" and run.finished_at is not None


def test_a_slot_in_a_blackout_window_is_recorded_skipped_naming_it(
    make_job: Callable[..., Job],
) -> None:
    job = make_job()
    slot = _slot()
    Blackout.objects.create(
        name="freeze",
        job=job,
        starts_at=slot - timedelta(hours=1),
        ends_at=slot + timedelta(hours=1),
    )
    (made,) = slot_records.insert_scheduled([(job.pk, slot)])
    assert made.status == RunStatus.SKIPPED
    assert JobRun.objects.get(pk=made.run_id).error == "blackout: freeze"


def test_scheduled_runs_of_finds_only_slots_still_waiting(make_job: Callable[..., Job]) -> None:
    job = make_job()
    waiting, claimed, never = _slot(3), _slot(2), _slot(1)
    slot_records.insert_scheduled([(job.pk, waiting), (job.pk, claimed)])
    JobRun.objects.filter(job=job, scheduled_for=claimed).update(status=RunStatus.RUNNING)
    found = slot_records.scheduled_runs_of([(job.pk, waiting), (job.pk, claimed), (job.pk, never)])
    assert [run.scheduled_for for run in found] == [waiting]
    assert slot_records.scheduled_runs_of([]) == []


def test_a_missed_slot_is_recorded_once_and_never_over_a_fired_one(
    make_job: Callable[..., Job],
) -> None:
    job = make_job()
    fired, missed = _slot(20), _slot(10)
    slot_records.insert_scheduled([(job.pk, fired)])
    made = slot_records.insert_missed(
        [(job.pk, fired, "every beat was down"), (job.pk, missed, "every beat was down")]
    )
    assert [run.scheduled_for for run in made] == [missed]
    assert slot_records.insert_missed([(job.pk, missed, "again")]) == []
    statuses = dict(JobRun.objects.filter(job=job).values_list("scheduled_for", "status"))
    assert statuses == {fired: RunStatus.SCHEDULED, missed: RunStatus.MISSED}
    assert slot_records.insert_missed([]) == []


def test_newest_slots_reads_each_jobs_newest_scheduled_slot_and_the_database_clock(
    make_job: Callable[..., Job],
) -> None:
    with_runs, without = make_job("with-runs"), make_job("without")
    old, new = _slot(60), _slot(30)
    slot_records.insert_scheduled([(with_runs.pk, old), (with_runs.pk, new)])
    JobRun.objects.create(job=with_runs, scheduled_for=_slot(0), trigger=Trigger.MANUAL)
    db_now, newest = slot_records.newest_slots([with_runs.pk, without.pk])
    assert newest == {with_runs.pk: new}
    assert abs((db_now - timezone.now()).total_seconds()) < 60
    db_now, newest = slot_records.newest_slots([])
    assert newest == {} and db_now is not None


def test_the_published_stamp_is_set_once(make_job: Callable[..., Job]) -> None:
    job = make_job()
    (run,) = slot_records.insert_scheduled([(job.pk, _slot())])
    assert JobRun.objects.get(pk=run.run_id).dispatched_at is None
    slot_records.mark_published([run.run_id])
    stamped = JobRun.objects.get(pk=run.run_id).dispatched_at
    assert stamped is not None
    slot_records.mark_published([run.run_id])  # a second publish keeps the first stamp
    assert JobRun.objects.get(pk=run.run_id).dispatched_at == stamped
    slot_records.mark_published([])
