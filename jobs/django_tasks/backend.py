"""``ClusterTaskBackend``: Django's Tasks framework (``django.tasks``, Django 6.0) on the cluster.

``TASKS = {"default": {"BACKEND": "jobs.django_tasks.backend.ClusterTaskBackend"}}`` and every
``@task`` of that backend is a guarded call: ``my_task.enqueue(*args, **kwargs)`` records a run
(trigger ``call``, with these arguments) of the task's own job, the job named after the task's
module path (made on its first enqueue, triggered only, with the policies ``guarded``
declares), and publishes it through Celery after commit; a worker runs it under the guard like
any run. ``get_result(id)`` reads the run's record (``jobs.django_tasks.results``).
See docs/tasks.md.
"""

from __future__ import annotations

import copy
from typing import Any

from celery import current_app
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from jobs import registry
from jobs.broker import messages
from jobs.django_tasks.framework import AVAILABLE, BaseTaskBackend, normalize_json, tasks
from jobs.exceptions import NoJobForCall

# Django's priorities run from -100 to 100 (higher first), a job's from 0 to 9 (9 first).
_DJANGO_PRIORITIES = (-100, 100)
_JOB_PRIORITIES = (0, 9)


class ClusterTaskBackend(BaseTaskBackend):
    """A ``TASKS`` backend whose tasks run as guarded runs on the cluster's Celery workers."""

    # run_after: the run's slot, on its message as Celery's eta (the worker waits until then).
    supports_defer = True
    # Coroutine functions run to their end on the worker (Task.call).
    supports_async_task = True
    # From any process: the result is the run's record.
    supports_get_result = True
    # On the message, mapped onto the broker's ten levels (jobs.broker.messages.wire_priority).
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        if not AVAILABLE:
            raise ImproperlyConfigured(
                "TASKS names jobs.django_tasks.backend.ClusterTaskBackend, which needs Django "
                "6.0's django.tasks; this Django has none: remove it from TASKS"
            )
        super().__init__(alias, params)

    def validate_task(self, task: Any) -> None:
        """Django's checks, then the task is known to the cluster: a job may run it."""
        super().validate_task(task)
        registry.add_django_task(task)

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Record a run of ``task``'s own job with these arguments, and publish it after commit
        to ``task.queue_name``, at ``task.priority``, held until ``task.run_after``."""
        # The models: not ready yet while Django imports the modules that define tasks.
        from jobs import calls
        from jobs.django_tasks import results

        self.validate_task(task)
        spec = registry.get(task.module_path)
        # Django's rule, as its TaskResult applies it: UTF-8 bytes become text, tuples lists;
        # a type JSON has no form of is refused here (TypeError), before anything is recorded.
        args, kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))

        def record() -> Any:
            return calls.call(
                calls.Caller(spec.name, job=spec.name),
                args,
                kwargs,
                start_at=task.run_after or timezone.now(),
                publish=False,
            )

        try:
            run = record()
        except NoJobForCall:  # the first enqueue (or the job runs another task: raised again)
            _make_own_job(spec)
            run = record()
        result = results.enqueued(task, run, backend=self.alias)
        tasks.signals.task_enqueued.send(type(self), task_result=result)
        if current_app.conf.task_always_eager:
            # A project's tests: the run goes through the runner here and now, under its lease,
            # as GuardedTask's calls do (jobs.calls).
            from jobs.guard.runner import execute_eagerly

            execute_eagerly(run.pk, task_id=messages.task_id_for(run.pk))
            return results.result_of_run(run.pk, backend=self.alias)
        routed = _routed(run.job, task, declared=spec.func)
        transaction.on_commit(lambda: calls.publish_call(routed, run), robust=True)
        return result

    def get_result(self, result_id: str) -> Any:
        """The result ``result_id``, read from its runs (``TaskResultDoesNotExist`` when no run
        of a Django task has this id)."""
        from jobs.django_tasks import results

        return results.result_of(result_id, backend=self.alias)


def _make_own_job(spec: registry.JobSpec) -> Any:
    """The job named after the task, which its enqueued runs belong to; made on its first
    enqueue (triggered only: no slots of its own) with the routing the task declares (not a
    ``.using()`` variant's), then the operators' to edit like any job."""
    from jobs.audit import Actor
    from jobs.models import Job
    from jobs.schedule.kinds import Triggered
    from jobs.services import JobDefinition, create_job

    task: Any = spec.func  # the task as declared
    policies = {"queue": task.queue_name, **spec.policies}
    if task.priority != tasks.base.DEFAULT_TASK_PRIORITY:
        policies.setdefault("priority", job_priority(task.priority))
    definition = JobDefinition(
        name=spec.name, task=spec.name, schedule=Triggered(), policies=policies
    )
    try:
        with transaction.atomic():
            return create_job(definition, actor=Actor.code("django.tasks enqueue"))
    except (IntegrityError, ValidationError):
        # A concurrent first enqueue made it (its name taken); else the declaration is wrong.
        made = Job.objects.filter(name=spec.name).first()
        if made is None:
            raise
        return made


def _routed(job: Any, task: Any, declared: Any) -> Any:
    """The job as this run's message is routed: the job's queue and priority (the declared
    task's, or what an operator set since), except where ``task`` is a ``.using()`` variant that
    changed them. A re-publish by maintenance (a lost message) routes by the job's own
    (docs/tasks.md)."""
    routed = copy.copy(job)
    if task.queue_name != declared.queue_name:
        routed.queue = task.queue_name
    if task.priority != declared.priority:
        routed.priority = job_priority(task.priority)
    return routed


def job_priority(priority: int) -> int:
    """A Django task's priority (-100 to 100) as a job's (0 to 9), in proportion."""
    low, high = _DJANGO_PRIORITIES
    first, last = _JOB_PRIORITIES
    return first + round((priority - low) * (last - first) / (high - low))
