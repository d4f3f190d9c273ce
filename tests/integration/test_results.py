"""A Django ``TaskResult`` read from the run records (jobs.django_tasks.results), on real
PostgreSQL: the newest attempt gives the status, every failed attempt an error, a result's id is
its first run's task id.

Django 5.2 has no ``django.tasks``: skipped there (CI runs this module on Django 6 too)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("django.tasks")

from celery import current_app
from django.tasks import TaskResultStatus
from django.tasks.exceptions import TaskResultDoesNotExist
from django.utils import timezone

from jobs.django_tasks import results
from jobs.models import Job, JobRun, RunStatus, Trigger
from tests.support import django_tasks

pytestmark = pytest.mark.django_db(transaction=True)

BACKEND = "default"


@pytest.fixture(autouse=True)
def sent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Enqueueing publishes nothing: these tests write the runs' outcomes themselves."""
    monkeypatch.setattr(current_app, "send_task", lambda name, **options: None)


def _first(*args: Any) -> JobRun:
    result = django_tasks.add.enqueue(*args)
    return JobRun.objects.get(pk=int(result.id.removeprefix("jobrun-")))


def _ended(run: JobRun, status: RunStatus, *, node: str = "w1", **fields: Any) -> JobRun:
    started = timezone.now() - timedelta(seconds=10)
    JobRun.objects.filter(pk=run.pk).update(
        status=status, started_at=started, finished_at=started + timedelta(seconds=1), node=node,
        **fields,
    )  # fmt: skip
    run.refresh_from_db()
    return run


def _retry_of(run: JobRun) -> JobRun:
    return JobRun.objects.create(
        job=run.job, scheduled_for=run.scheduled_for, trigger=Trigger.RETRY,
        attempt=run.attempt + 1, retry_of=run,
    )  # fmt: skip


def test_each_run_status_is_a_task_result_status() -> None:
    expected = {
        RunStatus.SCHEDULED: TaskResultStatus.READY,
        RunStatus.RUNNING: TaskResultStatus.RUNNING,
        RunStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    }
    for status in RunStatus:
        assert results.status_of(status) == expected.get(status, TaskResultStatus.FAILED)


def test_an_enqueued_run_is_ready_without_attempts() -> None:
    run = _first(2, 3)
    result = results.result_of(f"jobrun-{run.pk}", backend=BACKEND)
    assert (result.id, result.status, result.args, result.kwargs) == (
        f"jobrun-{run.pk}", TaskResultStatus.READY, [2, 3], {},
    )  # fmt: skip
    assert result.errors == result.worker_ids == []
    assert (result.started_at, result.finished_at, result.last_attempted_at) == (None, None, None)
    made = results.enqueued(django_tasks.add, run, backend=BACKEND)
    assert (made.id, made.status, made.enqueued_at) == (result.id, result.status, run.created_at)


def test_a_succeeded_run_gives_its_stored_return_value() -> None:
    run = _ended(_first(2, 3), RunStatus.SUCCEEDED, result=5)
    result = results.result_of_run(run.pk, backend=BACKEND)
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5
    assert (result.started_at, result.finished_at) == (run.started_at, run.finished_at)
    assert result.worker_ids == ["w1"] and result.errors == []


@pytest.mark.parametrize(
    ("status", "traceback", "error", "path"),
    [
        (RunStatus.FAILED, "Traceback ...\nValueError: no such city\n", "", "builtins.ValueError"),
        (RunStatus.FAILED, "Traceback ...\nbilling.errors.Declined: card\n", "",
         "billing.errors.Declined"),
        (RunStatus.FAILED, "", "hard time limit exceeded", "jobs.exceptions.RunFailed"),
        (RunStatus.FAILED, "Traceback ...\nnot a class name: x\n", "", "jobs.exceptions.RunFailed"),
        (RunStatus.LOST, "", "the lease lapsed", "jobs.exceptions.RunLost"),
        (RunStatus.SKIPPED, "", "another run holds the lease", "jobs.exceptions.RunFailed"),
    ],
)  # fmt: skip
def test_a_failed_attempt_is_an_error_naming_what_ended_it(
    status: RunStatus, traceback: str, error: str, path: str
) -> None:
    run = _ended(_first(1, 1), status, traceback=traceback, error=error)
    result = results.result_of_run(run.pk, backend=BACKEND)
    assert result.status == TaskResultStatus.FAILED
    [failure] = result.errors
    assert failure.exception_class_path == path
    assert failure.traceback == (traceback or error)


def test_a_retry_is_ready_again_then_gives_the_newest_attempts_outcome() -> None:
    first = _ended(_first(2, 3), RunStatus.FAILED, traceback="T\nRuntimeError: once\n")
    retry = _retry_of(first)
    waiting = results.result_of_run(retry.pk, backend=BACKEND)
    assert waiting.id == f"jobrun-{first.pk}" and waiting.status == TaskResultStatus.READY
    assert [e.exception_class_path for e in waiting.errors] == ["builtins.RuntimeError"]
    retry = _ended(retry, RunStatus.SUCCEEDED, node="w2", result=5)
    done = results.result_of(f"jobrun-{first.pk}", backend=BACKEND)
    assert (done.status, done.return_value, done.attempts) == ("SUCCESSFUL", 5, 2)
    assert done.worker_ids == ["w1", "w2"] and len(done.errors) == 1
    assert (done.started_at, done.last_attempted_at) == (first.started_at, retry.started_at)
    assert done.finished_at == retry.finished_at


def test_a_run_without_its_own_arguments_shows_its_jobs() -> None:
    run = _first(2, 3)
    Job.objects.filter(pk=run.job_id).update(args=[7, 8])
    JobRun.objects.filter(pk=run.pk).update(args=None, kwargs=None)
    result = results.result_of_run(run.pk, backend=BACKEND)
    assert (result.args, result.kwargs) == ([7, 8], {})


def test_no_result_for_an_id_of_no_run_or_of_a_run_of_no_django_task(
    make_job: Callable[..., Job],
) -> None:
    plain = JobRun.objects.create(job=make_job("plain"), scheduled_for=timezone.now())
    for result_id in ("nope", "jobrun-999999999", f"jobrun-{plain.pk}"):
        with pytest.raises(TaskResultDoesNotExist):
            results.result_of(result_id, backend=BACKEND)
