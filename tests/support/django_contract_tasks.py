"""The tasks of Django's own contract for a Tasks backend (tests/acceptance/
test_django_tasks_contract.py), one for each kind of task the cases of Django's ``tests/tasks``
and the django-tasks backport's database backend enqueue; written for this suite. Imported only
on Django 6 (the contract module importorskips ``django.tasks``)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

from django.tasks import TaskContext, task  # type: ignore[import-not-found,unused-ignore]


@task
def noop_task(*args: Any, **kwargs: Any) -> None:
    return None


@task
async def noop_task_async(*args: Any, **kwargs: Any) -> None:
    return None


@task
def calculate_meaning_of_life() -> int:
    return 42


@task
def failing_task_value_error() -> None:
    raise ValueError("This task failed due to ValueError")


@task
def failing_task_system_exit() -> None:
    raise SystemExit("This task failed due to SystemExit")


@task
def failing_task_keyboard_interrupt() -> None:
    raise KeyboardInterrupt("This task failed due to KeyboardInterrupt")


@task
def complex_exception() -> None:
    raise ValueError(ValueError("This task failed"))


@task
def complex_return_value() -> Any:
    """A value JSON has no form of."""
    return {"when": datetime(2026, 1, 1, tzinfo=UTC)}


@task
def exit_task() -> None:
    sys.exit(1)


@task(takes_context=True)
def get_task_id(context: Any) -> str:
    return str(context.task_result.id)


@task(takes_context=True)
def check_context(context: Any, attempt: int) -> None:
    assert isinstance(context, TaskContext)
    assert context.attempt == attempt
