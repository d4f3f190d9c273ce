"""Calling a Django ``@task`` for one run, on the worker, inside the guard (``jobs.guard.runner``
claims the run, holds the lease and records the outcome)."""

from __future__ import annotations

from typing import Any

from jobs.context import JobContext
from jobs.django_tasks import results
from jobs.django_tasks.framework import tasks


def call_task(task: Any, ctx: JobContext, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Call ``task`` as Django's own backends do (``Task.call``: a coroutine function runs to its
    end), first with Django's ``TaskContext`` when it ``takes_context``: its ``task_result`` is
    this run's (``RUNNING``, its ``attempt`` counting the retries before it)."""
    if not task.takes_context:
        return task.call(*args, **kwargs)
    result = results.result_of_run(ctx.run_id, backend=task.backend)
    return task.call(tasks.TaskContext(task_result=result), *args, **kwargs)
