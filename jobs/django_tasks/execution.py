"""Running a Django ``@task`` for one run, on the worker, inside the guard (``jobs.guard.runner``
claims the run, holds the lease and records the outcome), as Django's own backends run one:
``task_started`` before the call, the return value normalised by Django's rule, and
``task_finished`` once the outcome is on record. Django's own receivers of these signals log
the task's state line (``Task id=... path=... state=...``, logger ``django.tasks``)."""

from __future__ import annotations

import logging
from typing import Any

from jobs import registry
from jobs.context import JobContext
from jobs.django_tasks import results
from jobs.django_tasks.framework import normalize_json, tasks
from jobs.guard import after_finish
from jobs.guard.run_records import Claim
from jobs.values import jsonvalues

log = logging.getLogger(__name__)


def call_task(task: Any, ctx: JobContext, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Call ``task`` as Django's own backends do (``Task.call``: a coroutine function runs to its
    end), first with Django's ``TaskContext`` when it ``takes_context``: its ``task_result`` is
    this run's (``RUNNING``, its ``attempt`` counting the retries before it). Returns the value
    as JSON will hold it; raises, as the task's failure, when JSON cannot hold it."""
    result = results.result_of_run(ctx.run_id, backend=task.backend)
    tasks.signals.task_started.send(type(task.get_backend()), task_result=result)
    if task.takes_context:
        value = task.call(tasks.TaskContext(task_result=result), *args, **kwargs)
    else:
        value = task.call(*args, **kwargs)
    return storable(value)


def storable(value: Any) -> Any:
    """``value`` as Django's backends keep a return value (``normalize_json``: tuples become
    lists, UTF-8 ``bytes`` text; ``TypeError`` for a type JSON has no form of), and then as
    PostgreSQL's ``jsonb`` stores it (``ValueError`` for ``NaN``, a NUL character, deep nesting)."""
    normalised = normalize_json(value)
    jsonvalues.check_storable(normalised)
    return normalised


def send_finished(claim: Claim) -> None:
    """Django's ``task_finished`` for a run of a Django task that ended, sent once its outcome is
    recorded, so a receiver that reads the result finds it finished. None while a retry follows:
    the result is then ``READY`` again, not finished. A receiver that raises is logged; what was
    recorded stands."""
    if not registry.is_django_task(claim.job.task):
        return
    task: Any = registry.get(claim.job.task).func
    try:
        result = results.result_of_run(claim.run_id, backend=task.backend)
        if result.is_finished:
            tasks.signals.task_finished.send(type(task.get_backend()), task_result=result)
    except Exception:
        log.exception(
            "task_finished: a receiver failed (the run's outcome is recorded)",
            extra={"action": "task_finished_failed", "run_id": claim.run_id},
        )


after_finish.register("sending Django's task_finished", send_finished)
