"""A run killed at its hard time limit (jobs.guard.hard_limit), against real PostgreSQL: what the
worker's main process records when Celery reports ``TimeLimitExceeded``. The real kill by a
prefork worker is in tests/acceptance/test_hard_time_limit.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import SimpleNamespace

import pytest
from celery.exceptions import SoftTimeLimitExceeded, TimeLimitExceeded
from django.utils import timezone

from jobs.guard import hard_limit, lease, run_records
from jobs.models import Job, JobRun, RunStatus, Trigger

pytestmark = pytest.mark.django_db(transaction=True)

REASON = "hard time limit of 20 s exceeded: the worker killed the process running it"


def _claimed(job: Job) -> JobRun:
    run = JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.MANUAL)
    claim = run_records.claim(run.pk, node="node-x", pid=1, task_id="t", holder="node-x:1:run")
    assert claim is not None and claim.status == RunStatus.RUNNING
    run.refresh_from_db()
    return run


def _report(run: JobRun, exception: BaseException, task: str = "tests.record") -> None:
    """What Celery sends in the worker's main process (no event loop here: a thread at once)."""
    hard_limit.on_task_failure(
        sender=SimpleNamespace(name=task),
        exception=exception,
        kwargs={"run_id": run.pk, "job": run.job.name, "slot": run.scheduled_for.isoformat()},
    )


def _settled(run: JobRun) -> JobRun:
    deadline = time.monotonic() + 10
    while hard_limit._pending:
        assert time.monotonic() < deadline, "the recording thread did not finish"
        time.sleep(0.01)
    run.refresh_from_db()
    return run


def _settled_report(job: Job) -> JobRun:
    run = _claimed(job)
    _report(run, TimeLimitExceeded(20))
    return _settled(run)


def test_a_leased_run_is_recorded_failed_and_its_lease_released(
    make_job: Callable[..., Job],
) -> None:
    job = make_job(time_limit=20)
    run = _claimed(job)
    assert lease.current_holder(job.lock_key) is not None
    _report(run, TimeLimitExceeded(20))
    _report(run, TimeLimitExceeded(20))  # Celery sends it twice: recorded once
    run = _settled(run)
    assert (run.status, run.error) == (RunStatus.FAILED, REASON)
    assert run.finished_at is not None
    assert lease.current_holder(job.lock_key) is None
    assert not JobRun.objects.filter(retry_of=run).exists()  # never retried


def test_max_retries_do_not_apply(make_job: Callable[..., Job]) -> None:
    run = _settled_report(make_job(time_limit=20, max_retries=3))
    assert run.status == RunStatus.FAILED
    assert not JobRun.objects.filter(retry_of=run).exists()


def test_a_run_without_a_lease_is_recorded_failed(make_job: Callable[..., Job]) -> None:
    run = _settled_report(make_job(time_limit=20, overlap="allow"))
    assert run.fencing_token is None
    assert (run.status, run.error) == (RunStatus.FAILED, REASON)


def test_a_run_whose_lease_moved_on_is_recorded_lost(make_job: Callable[..., Job]) -> None:
    job = make_job(time_limit=20)
    run = _claimed(job)
    assert lease.force_release(job.lock_key)
    newer = lease.acquire(job.lock_key, "newer", 30)
    assert newer is not None
    _report(run, TimeLimitExceeded(20))
    run = _settled(run)
    assert run.status == RunStatus.LOST
    assert f"lease {job.lock_key} (token {run.fencing_token}) lapsed" in run.error
    holder = lease.current_holder(job.lock_key)
    assert holder is not None and holder.token == newer.token  # the newer holder keeps it


def test_a_run_that_recorded_its_outcome_keeps_it(make_job: Callable[..., Job]) -> None:
    job = make_job(time_limit=20)
    run = _claimed(job)
    assert run.fencing_token is not None
    run_records.finish_fenced(
        run.pk, key=run.lease_key, token=run.fencing_token, status=RunStatus.SUCCEEDED
    )
    _report(run, TimeLimitExceeded(20))
    assert _settled(run).status == RunStatus.SUCCEEDED


@pytest.mark.parametrize(
    ("exception", "task"),
    [
        pytest.param(ValueError("boom"), "tests.record", id="another-failure"),
        pytest.param(SoftTimeLimitExceeded(), "tests.record", id="soft-limit"),
        pytest.param(TimeLimitExceeded(20), "someone.elses_task", id="not-a-job"),
    ],
)
def test_other_failures_are_left_alone(
    make_job: Callable[..., Job], exception: BaseException, task: str
) -> None:
    run = _claimed(make_job(time_limit=20))
    _report(run, exception, task)
    assert _settled(run).status == RunStatus.RUNNING
