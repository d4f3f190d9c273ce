"""A run's request named after its job's task, where result backends read a task's name."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from celery import Task
from celery._state import pop_current_task, push_current_task  # type: ignore[attr-defined]

from jobs.observers.result_backends import name_task
from jobs.registry import RUN_TASK
from project.celery import app
from tests.support import plain_tasks


@contextmanager
def running(current: Task, **request: object) -> Iterator[None]:
    """``current`` as the current task, under a request as a worker gives it."""
    push_current_task(current)
    current.push_request(**request)
    try:
        yield
    finally:
        current.pop_request()
        pop_current_task()


def test_a_runs_message_is_named_after_the_jobs_task() -> None:
    task = app.tasks[RUN_TASK]
    with running(task, task=RUN_TASK, called_directly=False):
        name_task("billing.tasks.invoice")
        assert vars(task.request)["task"] == "billing.tasks.invoice"


def test_another_task_or_a_direct_call_keeps_its_name() -> None:
    other = plain_tasks.append
    with running(other, task=other.name, called_directly=False):
        name_task("billing.tasks.invoice")
        assert vars(other.request)["task"] == other.name
    run = app.tasks[RUN_TASK]
    with running(run, task=RUN_TASK):  # called directly: no worker's request to name
        name_task("billing.tasks.invoice")
        assert vars(run.request)["task"] == RUN_TASK
    name_task("billing.tasks.invoice")  # no task running: nothing to name
