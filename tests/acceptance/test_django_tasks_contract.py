"""Django's own contract for a Tasks backend, kept by ``ClusterTaskBackend`` on a real
``celery worker``: the cases of Django 6.0's ``tests/tasks`` (test_immediate_backend.py,
test_tasks.py) and of the django-tasks backport's database backend tests that concern what a
backend does, written here for this backend, each named after the case it follows. Tasks run on
one worker shared by the module's tests (its queue is the module's own); outcomes are read back
through Django's API, from the run records.

A case that does not apply is listed below as skipped, with the reason. Cases about the
framework rather than a backend (``Task.using()``, ``Task.call()``, pickling, ``TaskError``'s
class lookup, a missing ``TASKS`` entry) are Django's own business and not repeated.

Django 5.2 has no ``django.tasks``: skipped there (CI runs this module on Django 6)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("django.tasks")

from asgiref.sync import async_to_sync
from celery import current_app
from django.db import transaction
from django.tasks import TaskResultStatus, default_task_backend, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
from django.test import override_settings
from django.utils import timezone

from jobs.django_tasks.backend import ClusterTaskBackend
from jobs.models import JobRun
from tests.acceptance.conftest import Cluster, new_cluster, wait_for
from tests.support import django_contract_tasks as test_tasks

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True),
    # One pytest process runs them all (make test's --dist loadgroup): one worker for the module.
    pytest.mark.xdist_group("django_tasks_contract"),
]

BACKEND = "jobs.django_tasks.backend.ClusterTaskBackend"
# Every queue is allowed in this process: the worker's is the module's own.
ANY_QUEUE = {"default": {"BACKEND": BACKEND, "QUEUES": []}}
FINISH_TIMEOUT = 60


@pytest.fixture(scope="module")
def worker(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One worker for the module's cases: starting one per case would cost more than the cases."""
    running = new_cluster(tmp_path_factory.mktemp("contract") / "logs")
    running.start_worker("worker", env={"JOBS_MODULES": test_tasks.__name__})
    try:
        running.wait_ready("worker", timeout=90)
        yield running
    finally:
        running.stop_all()


@pytest.fixture(autouse=True)
def any_queue() -> Iterator[None]:
    with override_settings(TASKS=ANY_QUEUE):
        yield


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """For the cases no worker takes part in: messages captured instead of published."""
    names: list[str] = []
    monkeypatch.setattr(current_app, "send_task", lambda name, **options: names.append(name))
    return names


def _on(worker: Cluster, task: Any) -> Any:
    """``task`` routed to the module's worker."""
    return task.using(queue_name=worker.queue)


def _finished(*results: Any) -> None:
    def done() -> bool:
        for result in results:
            result.refresh()
        return all(result.is_finished for result in results)

    wait_for(done, timeout=FINISH_TIMEOUT, what="the tasks finished")


def _assert_times(result: Any) -> None:
    assert result.started_at is not None and result.last_attempted_at is not None
    assert result.finished_at is not None
    assert result.started_at >= result.enqueued_at
    assert result.finished_at >= result.started_at


def _state_lines(worker: Cluster, result: Any) -> list[str]:
    """The worker's ``django.tasks`` lines for ``result`` (Django's receivers of
    task_started / task_finished), as Celery's log handler writes them."""
    return [
        line
        for line in worker.log_of("worker").splitlines()
        if f"] Task id={result.id} " in line and "state=" in line
    ]


# --- tests/tasks/test_immediate_backend.py --------------------------------------------------------


def test_using_correct_backend() -> None:
    assert default_task_backend == task_backends["default"]
    assert isinstance(task_backends["default"], ClusterTaskBackend)
    assert (default_task_backend.alias, default_task_backend.options) == ("default", {})


@pytest.mark.parametrize("task", [test_tasks.noop_task, test_tasks.noop_task_async])
def test_enqueue_task(worker: Cluster, task: Any) -> None:
    task = _on(worker, task)
    result = task.enqueue(1, two=3)
    _finished(result)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.is_finished is True
    _assert_times(result)
    assert result.return_value is None
    assert result.task == task
    assert (result.args, result.kwargs, result.attempts) == ([1], {"two": 3}, 1)


@pytest.mark.parametrize("task", [test_tasks.noop_task, test_tasks.noop_task_async])
def test_enqueue_task_async(worker: Cluster, task: Any) -> None:
    task = _on(worker, task)
    result = async_to_sync(task.aenqueue)()
    _finished(result)
    assert result.status == TaskResultStatus.SUCCESSFUL
    _assert_times(result)
    assert (result.return_value, result.args, result.kwargs, result.attempts) == (None, [], {}, 1)


@pytest.mark.parametrize(
    ("task", "exception", "message"),
    [
        (test_tasks.failing_task_value_error, ValueError, "This task failed due to ValueError"),
        (test_tasks.failing_task_system_exit, SystemExit, "This task failed due to SystemExit"),
    ],
)
def test_catches_exception(worker: Cluster, task: Any, exception: type, message: str) -> None:
    task = _on(worker, task)
    result = task.enqueue()
    _finished(result)
    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    _assert_times(result)
    [error] = result.errors
    assert error.exception_class is exception
    assert error.traceback.endswith(f"{exception.__name__}: {message}\n"), error.traceback
    assert (result.task, result.args, result.kwargs) == (task, [], {})
    # Django logs the failure (logger django.tasks, ERROR): here on the worker that ran it.
    assert _state_lines(worker, result)[-1].endswith("state=FAILED")


def test_throws_keyboard_interrupt(worker: Cluster) -> None:
    """Deliberately different. Django's ImmediateBackend runs the task in the caller's process and
    lets KeyboardInterrupt through (it may be the user's Ctrl-C). On a worker's pool process,
    which ignores SIGINT, it can only be the task's own: recorded FAILED with it, and the worker
    runs on. Run eagerly here (task_always_eager), it is recorded and raised again
    (tests/integration/test_backend.py)."""
    result = _on(worker, test_tasks.failing_task_keyboard_interrupt).enqueue()
    after = _on(worker, test_tasks.calculate_meaning_of_life).enqueue()
    _finished(result, after)
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is KeyboardInterrupt
    assert (after.status, after.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


def test_complex_exception(worker: Cluster) -> None:
    result = _on(worker, test_tasks.complex_exception).enqueue()
    _finished(result)
    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    _assert_times(result)
    assert result._return_value is None
    assert result.errors[0].exception_class is ValueError
    assert 'ValueError(ValueError("This task failed"))' in result.errors[0].traceback


def test_complex_return_value(worker: Cluster) -> None:
    result = _on(worker, test_tasks.complex_return_value).enqueue()
    _finished(result)
    assert result.status == TaskResultStatus.FAILED
    _assert_times(result)
    assert result._return_value is None
    assert result.errors[0].exception_class is TypeError
    assert "Unsupported type" in result.errors[0].traceback


def test_result(worker: Cluster) -> None:
    task = _on(worker, test_tasks.calculate_meaning_of_life)
    result: Any = default_task_backend.enqueue(task, [], {})
    _finished(result)
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


def test_result_async(worker: Cluster) -> None:
    task = _on(worker, test_tasks.calculate_meaning_of_life)
    result: Any = async_to_sync(default_task_backend.aenqueue)(task, [], {})
    _finished(result)
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


@pytest.mark.skip(reason="supports_get_result: results are read back, see test_get_result")
def test_cannot_get_result() -> None:
    """ImmediateBackend keeps no results."""


@pytest.mark.skip(reason="supports_get_result: results refresh, see test_refresh_result")
def test_cannot_refresh_result() -> None:
    """ImmediateBackend keeps no results."""


@pytest.mark.skip(reason="supports_defer: run_after holds the run, see test_run_after")
def test_cannot_pass_run_after() -> None:
    """ImmediateBackend cannot defer."""


def test_enqueue_logs(worker: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    """The enqueued line in the enqueuing process; the RUNNING and SUCCESSFUL lines on the worker
    that ran the task (Django's one process logs all three)."""
    with caplog.at_level(logging.DEBUG, logger="django.tasks"):
        result = _on(worker, test_tasks.noop_task).enqueue()
    _finished(result)
    [enqueued] = [r.getMessage() for r in caplog.records if r.name == "django.tasks"]
    assert "enqueued" in enqueued and result.id in enqueued
    running, successful = _state_lines(worker, result)
    assert running.endswith("state=RUNNING") and successful.endswith("state=SUCCESSFUL")


def test_failed_logs(worker: Cluster) -> None:
    result = _on(worker, test_tasks.failing_task_value_error).enqueue()
    _finished(result)
    running, failed = _state_lines(worker, result)
    assert running.endswith("state=RUNNING") and failed.endswith("state=FAILED")


def test_successful_task_no_none_type_in_logs(worker: Cluster) -> None:
    result = _on(worker, test_tasks.noop_task).enqueue()
    _finished(result)
    assert result.status == TaskResultStatus.SUCCESSFUL
    lines = _state_lines(worker, result)
    assert len(lines) == 2 and not any("NoneType" in line for line in lines)


def test_takes_context(worker: Cluster) -> None:
    result = _on(worker, test_tasks.get_task_id).enqueue()
    _finished(result)
    assert result.return_value == result.id


def test_context(worker: Cluster) -> None:
    result = _on(worker, test_tasks.check_context).enqueue(1)
    _finished(result)
    assert result.status == TaskResultStatus.SUCCESSFUL


def test_validate_on_enqueue(sent: list[str]) -> None:
    task = test_tasks.noop_task.using(queue_name="unknown_queue")
    with (
        override_settings(TASKS={"default": {"BACKEND": BACKEND, "QUEUES": ["queue-1"]}}),
        pytest.raises(InvalidTask, match="Queue 'unknown_queue' is not valid for backend"),
    ):
        task.enqueue()
    assert sent == [] and not JobRun.objects.exists()


def test_validate_on_aenqueue(sent: list[str]) -> None:
    task = test_tasks.noop_task.using(queue_name="unknown_queue")
    with (
        override_settings(TASKS={"default": {"BACKEND": BACKEND, "QUEUES": ["queue-1"]}}),
        pytest.raises(InvalidTask, match="Queue 'unknown_queue' is not valid for backend"),
    ):
        async_to_sync(task.aenqueue)()
    assert sent == [] and not JobRun.objects.exists()


def test_doesnt_wait_until_transaction_commit_by_default(worker: Cluster) -> None:
    """Deliberately different: ImmediateBackend runs the task inside the transaction. Here the run
    is recorded in it and published when it commits (a rollback leaves no run and no message),
    so the worker never meets a run it cannot see."""
    with transaction.atomic():
        result = _on(worker, test_tasks.noop_task).enqueue()
        assert result.enqueued_at is not None
        assert result.status == TaskResultStatus.READY
        committed = timezone.now()
    _finished(result)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.started_at >= committed - timedelta(seconds=1)
    with transaction.atomic():
        rolled_back = _on(worker, test_tasks.noop_task).enqueue()
        transaction.set_rollback(True)
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(rolled_back.id)


# --- tests/tasks/test_tasks.py, with this backend as the default ----------------------------------


def test_enqueue_task_ready(sent: list[str]) -> None:
    """test_tasks.py's test_enqueue_task: a task enqueued and not yet run is READY."""
    result = test_tasks.noop_task.enqueue()
    assert result.status == TaskResultStatus.READY
    assert (result.task, result.args, result.kwargs) == (test_tasks.noop_task, [], {})
    assert len(sent) == 1
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018


def test_enqueue_with_invalid_argument(sent: list[str]) -> None:
    with pytest.raises(TypeError, match="Unsupported type"):
        test_tasks.noop_task.enqueue(datetime.now())
    with pytest.raises(TypeError, match="Unsupported type"):
        async_to_sync(test_tasks.noop_task.aenqueue)(datetime.now())
    assert sent == [] and not JobRun.objects.exists()


def test_enqueue_with_wrong_arguments(sent: list[str]) -> None:
    """Deliberately different: Django's backends accept the enqueue and the task fails with
    TypeError when it runs. Here the arguments are checked against the function's signature at
    enqueue, as for any guarded call: no run is recorded that could never succeed."""
    with pytest.raises(TypeError, match="argument"):
        test_tasks.calculate_meaning_of_life.enqueue(1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="argument"):
        test_tasks.check_context.enqueue()  # type: ignore[call-arg]
    assert sent == [] and not JobRun.objects.exists()


def test_enqueue_with_bytes_argument(worker: Cluster) -> None:
    """Django's normalize_json, as its TaskResult applies it: UTF-8 bytes are text, tuples
    lists, in the result and in the call on the worker."""
    result = _on(worker, test_tasks.noop_task).enqueue(b"abc", (1, 2), key=b"v")
    assert (result.args, result.kwargs) == (["abc", [1, 2]], {"key": "v"})
    _finished(result)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert (result.args, result.kwargs) == (["abc", [1, 2]], {"key": "v"})


def test_get_result(sent: list[str]) -> None:
    result = default_task_backend.enqueue(test_tasks.noop_task, [], {})
    assert test_tasks.noop_task.get_result(result.id) == result


def test_get_result_async(sent: list[str]) -> None:
    result = async_to_sync(default_task_backend.aenqueue)(test_tasks.noop_task, [], {})
    assert async_to_sync(test_tasks.noop_task.aget_result)(result.id) == result


def test_get_missing_result() -> None:
    with pytest.raises(TaskResultDoesNotExist):
        test_tasks.noop_task.get_result("123")
    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(test_tasks.noop_task.aget_result)("123")


def test_get_incorrect_result(sent: list[str]) -> None:
    result = default_task_backend.enqueue(test_tasks.noop_task_async, [], {})
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        test_tasks.noop_task.get_result(result.id)


def test_refresh_result(sent: list[str]) -> None:
    result = async_to_sync(test_tasks.noop_task.aenqueue)()
    original = dataclasses.asdict(result)
    result.refresh()
    assert dataclasses.asdict(result) == original
    async_to_sync(result.arefresh)()
    assert dataclasses.asdict(result) == original


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        ({"priority": -101}, "priority must be a whole number between -100 and 100"),
        ({"priority": 101}, "priority must be a whole number between -100 and 100"),
        ({"priority": 3.1}, "priority must be a whole number between -100 and 100"),
        ({"run_after": datetime(2030, 1, 1)}, "run_after must be an aware datetime"),
    ],
)
def test_invalid_task(variant: dict[str, Any], message: str) -> None:
    """test_tasks.py's test_invalid_priority and test_naive_datetime: this backend's
    validate_task refuses what Django's base refuses."""
    with pytest.raises(InvalidTask, match=message):
        test_tasks.noop_task.using(**variant)


def test_unknown_queue_name() -> None:
    with (
        override_settings(TASKS={"default": {"BACKEND": BACKEND, "QUEUES": ["default"]}}),
        pytest.raises(InvalidTask, match="Queue 'queue-2' is not valid for backend"),
    ):
        test_tasks.noop_task.using(queue_name="queue-2")


# --- django-tasks (the backport): its database backend's tests ------------------------------------


def test_batch_processes_all_tasks(worker: Cluster) -> None:
    noops = [_on(worker, test_tasks.noop_task).enqueue() for _ in range(3)]
    failing = _on(worker, test_tasks.failing_task_value_error).enqueue()
    _finished(*noops, failing)
    assert [r.status for r in noops] == [TaskResultStatus.SUCCESSFUL] * 3
    assert failing.status == TaskResultStatus.FAILED


def test_doesnt_process_different_queue(worker: Cluster) -> None:
    """A run on a queue no worker consumes stays READY while the worker runs the one on its
    own queue, enqueued after it."""
    elsewhere = test_tasks.noop_task.using(queue_name=f"{worker.queue}-unconsumed").enqueue()
    here = _on(worker, test_tasks.noop_task).enqueue()
    _finished(here)
    elsewhere.refresh()
    assert (elsewhere.status, here.status) == (TaskResultStatus.READY, TaskResultStatus.SUCCESSFUL)


def test_run_after(worker: Cluster) -> None:
    """A run is held until its run_after: one ten hours away stays READY while the worker runs
    the others; one a moment away starts no earlier than it."""
    far = _on(worker, test_tasks.noop_task).using(run_after=timezone.now() + timedelta(hours=10))
    near_at = timezone.now() + timedelta(seconds=1)
    held = far.enqueue()
    near = _on(worker, test_tasks.noop_task).using(run_after=near_at).enqueue()
    now = _on(worker, test_tasks.noop_task).enqueue()
    _finished(near, now)
    assert (near.status, now.status) == (TaskResultStatus.SUCCESSFUL, TaskResultStatus.SUCCESSFUL)
    assert near.started_at >= near_at
    held.refresh()
    assert held.status == TaskResultStatus.READY and held.started_at is None


def test_worker_doesnt_exit(worker: Cluster) -> None:
    result = _on(worker, test_tasks.exit_task).enqueue()
    after = _on(worker, test_tasks.calculate_meaning_of_life).enqueue()
    _finished(result, after)
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is SystemExit
    assert (after.status, after.return_value) == (TaskResultStatus.SUCCESSFUL, 42)
    assert "WorkerLostError" not in worker.log_of("worker")


def test_check() -> None:
    assert list(default_task_backend.check()) == []


@pytest.mark.skip(
    reason="a job's task is validated when its row is written; a worker without the task's code "
    "records the run failed (tests/integration/test_plain_tasks.py, test_bad_rows.py)"
)
def test_invalid_task_path() -> None:
    """The backport's rows name any import path; ours name registered tasks."""


@pytest.mark.skip(
    reason="enqueue_on_commit was dropped from Django 6.0's API; runs are always published on "
    "commit (test_doesnt_wait_until_transaction_commit_by_default)"
)
def test_wait_until_transaction_commit() -> None:
    """The backport's ENQUEUE_ON_COMMIT setting."""


@pytest.mark.skip(
    reason="the order among ready runs is the broker's, by the message priority Django's "
    "priority maps onto (tests/acceptance/test_priorities.py); no query orders them"
)
def test_run_after_priority() -> None:
    """The backport's worker query orders ready rows by priority, then run_after."""


@pytest.mark.skip(
    reason="the backport's row locking (select_for_update skip_locked) is its way to claim a "
    "task once; ours is the run's claim and lease (tests/integration/test_guarantee_sql.py)"
)
def test_worker_with_locked_rows() -> None:
    """The backport's claim."""
