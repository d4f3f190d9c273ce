"""A Django ``TaskResult`` read from our run records: what ``get_result()`` answers.

A result's id is its first run's Celery task id (``jobrun-<id>``, as Flower shows it). Its
attempts are that run and its retries (``retry_of``, after an exception with ``max_retries`` or
a lost node with ``on_lost=retry``); the newest attempt gives the status:

| run | ``TaskResultStatus`` |
| --- | --- |
| ``scheduled`` (first attempt or a retry waiting) | ``READY`` |
| ``running`` | ``RUNNING`` |
| ``succeeded`` | ``SUCCESSFUL``, with the stored return value |
| ``failed``, ``lost``, ``missed``, ``skipped``, ``cancelled`` | ``FAILED``, one error per attempt |
"""

from __future__ import annotations

from typing import Any

from jobs import registry
from jobs.broker import messages
from jobs.django_tasks.framework import tasks
from jobs.exceptions import RunFailed, RunLost, UnknownJobFunction
from jobs.models import JobRun, RunStatus

_STATUS: dict[str, str] = {
    RunStatus.SCHEDULED: "READY",
    RunStatus.RUNNING: "RUNNING",
    RunStatus.SUCCEEDED: "SUCCESSFUL",
}
# Every other status is an attempt that ended without success.
FAILED = "FAILED"


def status_of(run_status: str) -> Any:
    """The ``TaskResultStatus`` of a run's status."""
    return tasks.TaskResultStatus[_STATUS.get(run_status, FAILED)]


def result_of(result_id: str, *, backend: str) -> Any:
    """The ``TaskResult`` with id ``result_id`` (``TaskResultDoesNotExist`` when no run of a
    Django task has it)."""
    run_id = messages.run_id_of(result_id)
    if run_id is None:
        raise tasks.exceptions.TaskResultDoesNotExist(result_id)
    return result_of_run(run_id, backend=backend)


def result_of_run(run_id: int, *, backend: str) -> Any:
    """The ``TaskResult`` whose attempts include run ``run_id``."""
    first = _first_attempt(run_id)
    result_id = messages.task_id_for(run_id)
    if first is None:
        raise tasks.exceptions.TaskResultDoesNotExist(result_id)
    try:
        spec = registry.get(first.job.task)
    except UnknownJobFunction:
        spec = None
    if spec is None or not spec.django:
        raise tasks.exceptions.TaskResultDoesNotExist(result_id)
    return _result(spec.func, first, _attempts(first), backend)


def enqueued(task: Any, run: JobRun, *, backend: str) -> Any:
    """The ``TaskResult`` of ``task`` just enqueued as ``run`` (``READY``, no attempt yet),
    made from the run in hand: no read back."""
    return tasks.TaskResult(
        task=task,
        id=messages.task_id_for(run.pk),
        status=tasks.TaskResultStatus.READY,
        enqueued_at=run.created_at,
        started_at=None,
        finished_at=None,
        last_attempted_at=None,
        args=run.args,
        kwargs=run.kwargs,
        backend=backend,
        errors=[],
        worker_ids=[],
    )


def _first_attempt(run_id: int) -> JobRun | None:
    run = JobRun.objects.select_related("job").filter(pk=run_id).first()
    while run is not None and run.retry_of_id is not None:
        run = JobRun.objects.select_related("job").filter(pk=run.retry_of_id).first()
    return run


def _attempts(first: JobRun) -> list[JobRun]:
    """``first`` and its retries, oldest first (each run is retried at most once)."""
    attempts = [first]
    while (
        retry := JobRun.objects.filter(retry_of=attempts[-1]).order_by("pk").first()
    ) is not None:
        attempts.append(retry)
    return attempts


def _result(task: Any, first: JobRun, attempts: list[JobRun], backend: str) -> Any:
    latest = attempts[-1]
    started = [run for run in attempts if run.started_at is not None]
    status = status_of(latest.status)
    result = tasks.TaskResult(
        task=task,
        id=messages.task_id_for(first.pk),
        status=status,
        enqueued_at=first.created_at,
        started_at=started[0].started_at if started else None,
        finished_at=latest.finished_at if status in _FINISHED else None,
        last_attempted_at=started[-1].started_at if started else None,
        # A call's own arguments; the job's for its other runs (scheduled, triggered).
        args=first.job.args if first.args is None else first.args,
        kwargs=first.job.kwargs if first.kwargs is None else first.kwargs,
        backend=backend,
        errors=[_error(run) for run in attempts if status_of(run.status) == FAILED],
        worker_ids=[run.node for run in started],
    )
    if status == "SUCCESSFUL":
        object.__setattr__(result, "_return_value", latest.result)  # as Django's own backends
    return result


_FINISHED = frozenset({"SUCCESSFUL", FAILED})


def _error(run: JobRun) -> Any:
    """A failed attempt as Django's ``TaskError``: the class of what the function raised (read
    from its traceback's last line) and the traceback; for an attempt that never got to raise
    (lost, missed, skipped, cancelled, a time limit) ``RunLost`` / ``RunFailed`` and its reason."""
    return tasks.base.TaskError(
        exception_class_path=_exception_class_path(run),
        traceback=run.traceback or run.error,
    )


def _exception_class_path(run: JobRun) -> str:
    if run.status == RunStatus.LOST:
        return _path(RunLost)
    if run.status != RunStatus.FAILED or not run.traceback:
        return _path(RunFailed)
    last = run.traceback.strip().splitlines()[-1]
    raised = last.split(":", 1)[0].strip()
    if not raised or not all(part.isidentifier() for part in raised.split(".")):
        return _path(RunFailed)
    # The traceback names builtins' exceptions without their module.
    return raised if "." in raised else f"builtins.{raised}"


def _path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
