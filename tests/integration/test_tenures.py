"""The run records of continuous jobs (jobs.continuous.tenures): one ``continuous`` run per
tenure, earlier tenures of the lease closed lost on takeover, outcomes fenced by the lease."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import tests.support.jobs_continuous  # noqa: F401  (registers the functions)
from jobs.continuous import tenures
from jobs.guard import lease
from jobs.models import Job, JobRun, RunStatus, Trigger
from tests.support.job_factory import new_job

pytestmark = pytest.mark.django_db(transaction=True)

NODE = "a@h:1:continuous"


@pytest.fixture
def make_continuous(tmp_path: Path) -> Callable[[str], Job]:
    def make(name: str) -> Job:
        return new_job(name, "tests.continuous.step", None, log=tmp_path / "continuous.log")

    return make


@pytest.fixture
def job(make_continuous: Callable[[str], Job]) -> Job:
    return make_continuous("c")


def _take(job: Job, holder: str = NODE) -> lease.HeldLease:
    held = lease.acquire(job.lock_key, holder, 30)
    assert held is not None
    return held


def _begin(job: Job, held: lease.HeldLease, node: str = "a@h") -> tenures.Begun:
    return tenures.begin(job_id=job.pk, key=held.key, token=held.token, node=node, pid=42)


def test_begin_records_one_running_continuous_run_under_the_lease(job: Job) -> None:
    held = _take(job)
    begun = _begin(job, held)
    assert begun.orphans_closed == 0
    run = JobRun.objects.get(pk=begun.run_id)
    assert run.job_id == job.pk and run.trigger == Trigger.CONTINUOUS
    assert run.status == RunStatus.RUNNING and run.attempt == 1
    assert (run.lease_key, run.fencing_token) == (job.lock_key, held.token)
    assert (run.node, run.pid) == ("a@h", 42)
    assert run.started_at == begun.started_at


def test_begin_under_a_higher_token_closes_the_earlier_tenures_lost(job: Job) -> None:
    ghost = _take(job, "ghost@h:1:continuous")
    old = _begin(job, ghost, node="ghost@h")
    assert lease.force_release(job.lock_key)
    new = _begin(job, _take(job))
    assert new.orphans_closed == 1
    dead = JobRun.objects.get(pk=old.run_id)
    assert dead.status == RunStatus.LOST and dead.finished_at is not None
    assert (
        dead.error
        == f"its node stopped renewing the lease; taken over by a@h with token {ghost.token + 1}"
    )
    assert JobRun.objects.get(pk=new.run_id).status == RunStatus.RUNNING


def test_begin_leaves_other_jobs_and_finished_tenures_alone(
    job: Job, make_continuous: Callable[[str], Job]
) -> None:
    other = make_continuous("other")
    other_run = _begin(other, _take(other))
    first = _take(job)
    done = _begin(job, first)
    assert tenures.finish(done.run_id, key=first.key, token=first.token, status=RunStatus.SUCCEEDED)
    assert lease.release(first)
    assert _begin(job, _take(job)).orphans_closed == 0
    assert JobRun.objects.get(pk=other_run.run_id).status == RunStatus.RUNNING
    assert JobRun.objects.get(pk=done.run_id).status == RunStatus.SUCCEEDED


def test_finish_under_a_live_lease_records_the_outcome_asked(job: Job) -> None:
    held = _take(job)
    begun = _begin(job, held)
    recorded = tenures.finish(
        begun.run_id,
        key=held.key,
        token=held.token,
        status=RunStatus.FAILED,
        error="boom",
        traceback="Traceback ...",
        result='{"ended": "raised"}',
    )
    assert recorded == "failed"
    run = JobRun.objects.get(pk=begun.run_id)
    assert run.status == RunStatus.FAILED and run.finished_at is not None
    assert (run.error, run.traceback, run.result) == ("boom", "Traceback ...", {"ended": "raised"})


def test_finish_after_the_lease_lapsed_records_lost(job: Job) -> None:
    held = _take(job)
    begun = _begin(job, held)
    assert lease.force_release(job.lock_key)
    assert (
        tenures.finish(begun.run_id, key=held.key, token=held.token, status=RunStatus.SUCCEEDED)
        == "lost"
    )
    run = JobRun.objects.get(pk=begun.run_id)
    assert run.status == RunStatus.LOST
    assert run.error == "the lease lapsed before the tenure ended"


def test_finish_after_the_lease_lapsed_keeps_the_error_it_was_given(job: Job) -> None:
    held = _take(job)
    begun = _begin(job, held)
    assert lease.force_release(job.lock_key)
    recorded = tenures.finish(
        begun.run_id, key=held.key, token=held.token, status=RunStatus.FAILED, error="boom"
    )
    assert recorded == "lost"
    assert JobRun.objects.get(pk=begun.run_id).error == "boom"


def test_finish_of_a_tenure_already_closed_changes_nothing(job: Job) -> None:
    ghost = _take(job, "ghost@h:1:continuous")
    old = _begin(job, ghost, node="ghost@h")
    assert lease.force_release(job.lock_key)
    _begin(job, _take(job))  # the takeover closes it lost
    again = tenures.finish(old.run_id, key=ghost.key, token=ghost.token, status=RunStatus.SUCCEEDED)
    assert again is None
    assert JobRun.objects.get(pk=old.run_id).status == RunStatus.LOST


def test_finish_with_a_token_not_the_runs_changes_nothing(job: Job) -> None:
    held = _take(job)
    begun = _begin(job, held)
    wrong = tenures.finish(
        begun.run_id, key=held.key, token=held.token + 1, status=RunStatus.SUCCEEDED
    )
    assert wrong is None
    assert JobRun.objects.get(pk=begun.run_id).status == RunStatus.RUNNING


def test_close_orphans_records_lost_only_tenures_whose_lease_lapsed(
    job: Job, make_continuous: Callable[[str], Job]
) -> None:
    live_job = make_continuous("live")
    live = _begin(live_job, _take(live_job))
    held = _take(job, "ghost@h:1:continuous")
    orphan = _begin(job, held, node="ghost@h")
    assert tenures.close_orphans() == []
    assert lease.force_release(job.lock_key)
    assert tenures.close_orphans() == [
        tenures.Orphan(run_id=orphan.run_id, job_id=job.pk, node="ghost@h")
    ]
    run = JobRun.objects.get(pk=orphan.run_id)
    assert run.status == RunStatus.LOST and run.finished_at is not None
    assert "stopped renewing the lease" in run.error
    assert JobRun.objects.get(pk=live.run_id).status == RunStatus.RUNNING
    assert tenures.close_orphans() == []  # recorded once


def test_close_orphans_ignores_runs_that_are_not_tenures(
    job: Job, make_job: Callable[..., Job]
) -> None:
    scheduled = make_job("s")
    run = JobRun.objects.create(
        job=scheduled,
        scheduled_for=job.created_at,
        status=RunStatus.RUNNING,
        lease_key="gone",
        fencing_token=1,
    )
    assert tenures.close_orphans() == []
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.RUNNING


@pytest.mark.parametrize(
    ("stopped_for", "lease_lost", "raised", "expected"),
    [
        (None, False, False, RunStatus.SUCCEEDED),
        (RunStatus.CANCELLED, False, False, RunStatus.CANCELLED),
        (None, False, True, RunStatus.FAILED),
        (RunStatus.CANCELLED, False, True, RunStatus.FAILED),
        (None, True, True, RunStatus.LOST),
        (RunStatus.CANCELLED, True, False, RunStatus.LOST),
    ],
)
def test_status_for_puts_a_lost_lease_before_a_raise_before_the_stop_reason(
    stopped_for: RunStatus | None, lease_lost: bool, raised: bool, expected: RunStatus
) -> None:
    assert tenures.status_for(stopped_for, lease_lost=lease_lost, raised=raised) == expected
