"""What a result backend keeps of a run: the task it ran under its own name, as under stock beat.

A plain Celery task's (or a Django task's) runs go out to ``jobs.run``, which calls the task
under the guard (``jobs.registry``). Celery's result backends name a result after the message's
task (``request.task``: django-celery-results' ``TaskResult.task_name``, Celery's extended result
meta ``name``), which would be ``jobs.run`` for every such job. The request is given the job's
task before the result is stored; an ``@job`` function's messages name it already.
"""

from __future__ import annotations

from celery import current_task

from jobs.registry import RUN_TASK


def name_task(task_name: str) -> None:
    """Name the task being run ``task_name`` where a result backend reads it, if it is a run's
    message (``RUN_TASK``) executed by a worker."""
    if not current_task or current_task.name != RUN_TASK or current_task.request.called_directly:
        return
    # Celery's request holds the message's task name; the stubs leave it out.
    current_task.request.task = task_name  # type: ignore[attr-defined]
