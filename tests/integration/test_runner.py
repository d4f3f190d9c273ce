"""The worker-side runner (jobs.guard.runner), against real PostgreSQL: a run executes once,
its outcome, overlap and a lease taken away recorded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from jobs.audit import Actor
from jobs.guard import lease
from jobs.guard.runner import execute_run
from jobs.models import Job, JobRun, RunStatus
from tests.support.job_factory import new_run
from tests.support.worker_threads import lease_taken_mid_run

pytestmark = pytest.mark.django_db(transaction=True)


def test_execute_run_succeeds_once_and_records_everything(
    make_job: Callable[..., Job], tmp_path: Path
) -> None:
    log = tmp_path / "executions.log"
    run = new_run(make_job(kwargs={"log": str(log)}))
    execute_run(run.pk, task_id="task-1", node="node-a")
    execute_run(run.pk, task_id="task-1", node="node-b")  # a redelivery
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert run.node == "node-a" and run.pid is not None and run.task_id == "task-1"
    assert run.fencing_token == 1 and run.lease_key == "job:j"
    assert run.started_at is not None and run.finished_at is not None
    assert run.result == "recorded"
    assert run.duplicate_deliveries == 1
    assert len(log.read_text().splitlines()) == 1
    # The lease was given back at once.
    assert lease.acquire("job:j", "someone", 30) is not None


def test_a_failing_job_records_error_and_traceback(make_job: Callable[..., Job]) -> None:
    run = new_run(make_job(task="tests.fail"))
    execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error == "ValueError: boom from tests.fail"
    assert "raise ValueError" in run.traceback


@pytest.mark.parametrize(
    ("how", "error"),
    [
        ("sys.exit", "SystemExit: 1"),
        ("SystemExit", "SystemExit: stopping from tests.exit"),
        ("KeyboardInterrupt", "KeyboardInterrupt: "),
    ],
)
def test_a_job_that_exits_is_failed_at_once_and_gives_its_lease_back(
    make_job: Callable[..., Job], how: str, error: str
) -> None:
    """SystemExit and KeyboardInterrupt from the job's code are its failure, not the process's
    end: recorded now, lease released (a worker's pool process would otherwise die with them)."""
    run = new_run(make_job(task="tests.exit", kwargs={"how": how}))
    delivery = execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert (run.status, run.error) == (RunStatus.FAILED, error)
    assert run.traceback.rstrip().splitlines()[-1].startswith(error.rstrip(": "))
    assert isinstance(delivery.cause, SystemExit | KeyboardInterrupt)
    assert lease.acquire("job:j", "someone", 30) is not None


@pytest.mark.parametrize(("kind", "stored"), [("nan", "nan"), ("nul", "'a\\x00b'"), ("set", "{1}")])
def test_a_return_value_json_cannot_store_is_kept_as_its_repr(
    make_job: Callable[..., Job], kind: str, stored: str
) -> None:
    """A job's rule (a Django task fails instead, as Django's backends do): the run succeeded,
    and its finish, which jsonb would refuse NaN or NUL in, goes through."""
    run = new_run(make_job(task="tests.returns", kwargs={"kind": kind}))
    execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert (run.status, run.result) == (RunStatus.SUCCEEDED, stored)


def test_the_workers_own_shutdown_is_not_the_jobs_outcome(make_job: Callable[..., Job]) -> None:
    """Celery's hard shutdown raises WorkerTerminate wherever a solo worker's main thread is:
    it ends the process, and the run is left to be recorded lost."""
    from celery.exceptions import WorkerTerminate

    run = new_run(make_job(task="tests.exit", kwargs={"how": "WorkerTerminate"}))
    with pytest.raises(WorkerTerminate):
        execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING


def test_overlap_skip_records_the_holder(make_job: Callable[..., Job], tmp_path: Path) -> None:
    job = make_job(kwargs={"log": str(tmp_path / "log")})
    assert lease.acquire(job.lock_key, "other-node:1:run-99", 30) is not None
    run = new_run(job)
    execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert run.status == RunStatus.SKIPPED
    assert "other-node:1:run-99" in run.error
    assert not (tmp_path / "log").exists()


def test_overlap_allow_runs_without_a_lease(make_job: Callable[..., Job], tmp_path: Path) -> None:
    job = make_job(kwargs={"log": str(tmp_path / "log")}, overlap="allow")
    assert lease.acquire(job.lock_key, "other", 30) is not None
    run = new_run(job)
    execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.fencing_token is None


def test_an_unregistered_function_fails_the_run_with_a_clear_error(
    make_job: Callable[..., Job],
) -> None:
    job = make_job()
    Job.objects.filter(pk=job.pk).update(task="gone.function")
    run = new_run(job)
    execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "'gone.function' is not a registered job function" in run.error


def test_a_run_whose_lease_is_taken_away_is_recorded_lost(make_job: Callable[..., Job]) -> None:
    job = make_job(task="tests.wait_for_stop", lease_ttl=3)
    run = new_run(job)

    newer = lease_taken_mid_run(run.pk, job.lock_key)
    run.refresh_from_db()
    assert run.status == RunStatus.LOST
    assert newer.token > (run.fencing_token or 0)


def test_a_continuous_job_cannot_be_triggered(make_job: Callable[..., Job]) -> None:
    from jobs.exceptions import NotTriggerable
    from jobs.services import run_now

    job = make_job("forever", task="tests.wait_for_stop", schedule=None)
    with pytest.raises(NotTriggerable, match="continuous job"):
        run_now(job.name, actor=Actor.code("tests"))
    assert not JobRun.objects.filter(job=job).exists()
