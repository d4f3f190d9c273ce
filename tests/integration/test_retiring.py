"""Jobs that stop on their own (jobs.beat.retiring), against real PostgreSQL: a one_off job is
paused with its first slot, once however many beats fire it; a job past its expiry is paused by
maintenance; each pause audited under who made it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.beat import retiring
from jobs.models import AuditAction, AuditEntry, Job, JobRun, RunStatus

pytestmark = pytest.mark.django_db


def test_a_one_off_jobs_first_slot_is_recorded_and_the_job_paused_once(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("once")
    slot = timezone.now().replace(microsecond=0)
    made = retiring.record_one_off_slot(job.pk, slot, "")
    assert [(run.job_id, run.scheduled_for) for run in made] == [(job.pk, slot)]
    assert not Job.objects.get(pk=job.pk).enabled
    (paused,) = AuditEntry.objects.filter(action=AuditAction.PAUSE)
    assert paused.actor == str(retiring.ONE_OFF)
    # Another beat fires the same slot, or the next, before it heard of the pause: nothing.
    assert retiring.record_one_off_slot(job.pk, slot, "") == []
    assert retiring.record_one_off_slot(job.pk, slot + timedelta(hours=1), "") == []
    assert JobRun.objects.filter(job=job).count() == 1


def test_a_one_off_slot_its_calendar_skips_is_recorded_skipped(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("once")
    slot = timezone.now().replace(microsecond=0)
    (made,) = retiring.record_one_off_slot(job.pk, slot, "weekend: Saturday")
    assert made.status == RunStatus.SKIPPED
    assert JobRun.objects.get(pk=made.run_id).error == "weekend: Saturday"


def test_expired_jobs_are_paused_and_the_others_left_running(
    make_job: Callable[..., Job],
) -> None:
    expired, running = make_job("expired"), make_job("running")
    Job.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    Job.objects.filter(pk=running.pk).update(expires_at=timezone.now() + timedelta(days=1))
    assert retiring.pause_expired() == ["expired"]
    assert not Job.objects.get(pk=expired.pk).enabled and Job.objects.get(pk=running.pk).enabled
    (paused,) = AuditEntry.objects.filter(action=AuditAction.PAUSE)
    assert (paused.actor, paused.job_id) == (str(retiring.EXPIRY), expired.pk)
    assert retiring.pause_expired() == []  # already paused
