"""The one way the tests create a job: through ``services.create_job``, as an operator would.

Every tier uses it, directly or through the ``make_job`` fixture (tests/integration/conftest.py),
so a job made in a test is validated, audited and stored like one made in the admin or the CLI.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.utils import timezone

from jobs.audit import Actor
from jobs.models import Job, JobRun, Trigger
from jobs.schedule.kinds import Definition, Every
from jobs.services import JobDefinition, create_job

TESTS = Actor.code("tests")
HOURLY = Every(3600)


def new_job(
    name: str = "j",
    task: str = "tests.record",
    schedule: Definition | None = HOURLY,
    *,
    kwargs: Mapping[str, Any] | None = None,
    args: Sequence[Any] = (),
    after: Sequence[str] = (),
    log: Path | str | None = None,
    queue: str | None = None,
    enabled: bool = True,
    actor: Actor = TESTS,
    managed_by_code: bool = False,
    **policies: Any,
) -> Job:
    """A stored job named ``name`` that runs ``task`` on ``schedule`` (``None``: continuous).

    ``log`` is the file a ``tests.*`` job function appends a line to per execution (added to
    ``kwargs`` as ``log``); ``queue`` the Celery queue its runs are published to (a cluster's
    own queue in acceptance tests); ``managed_by_code`` marks it declared by a ``@job``. Any
    other keyword is a policy (``lease_ttl=3``, ``overlap="wait"``, ...)."""
    job_kwargs = dict(kwargs or {})
    if log is not None:
        job_kwargs = {"log": str(log), **job_kwargs}
    if queue is not None:
        policies = {"queue": queue, **policies}
    definition = JobDefinition(
        name=name,
        task=task,
        schedule=schedule,
        args=list(args),
        kwargs=job_kwargs,
        enabled=enabled,
        policies=policies,
        after=tuple(after),
    )
    return create_job(definition, actor=actor, managed_by_code=managed_by_code)


def new_run(job: Job, *, ago: float = 0.0, trigger: Trigger = Trigger.SCHEDULED) -> JobRun:
    """A ``scheduled`` run of ``job`` for the slot ``ago`` seconds before now, as a beat (or,
    with ``trigger``, an operator) would have recorded it, not yet published."""
    slot = timezone.now() - timedelta(seconds=ago)
    return JobRun.objects.create(job=job, scheduled_for=slot, trigger=trigger)


def run_here(job: Job) -> None:
    """A manual run of ``job`` executed at once in this process, as a worker would (the
    runner's claim, lease and fenced finish), without a broker."""
    from jobs.guard.runner import execute_run

    run = JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.MANUAL)
    execute_run(run.pk, task_id=f"jobrun-{run.pk}", node="n1")
