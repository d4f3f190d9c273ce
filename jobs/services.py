"""The operations on jobs that every edge (admin, CLI, API, code declarations) goes through, so
validation and the beat link are the same whichever way a job is changed."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from jobs import beat_link, lease, registry
from jobs.dispatch import trigger_now, trigger_once
from jobs.exceptions import JobNotFound
from jobs.models import JOB_DISPLAY_RELATED, Job, JobKind, JobRun, Trigger
from jobs.registry import POLICY_FIELDS
from jobs.schedules import Schedule


@dataclass(frozen=True)
class JobDefinition:
    """Everything needed to create a job. ``schedule`` ``None`` means a continuous job."""

    name: str
    task: str
    schedule: Schedule | None
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    enabled: bool = True
    policies: Mapping[str, Any] = field(default_factory=dict)


def get_job(name: str) -> Job:
    try:
        return Job.objects.select_related(*JOB_DISPLAY_RELATED).get(name=name)
    except Job.DoesNotExist:
        raise JobNotFound(f"no job named {name!r}") from None


def validate_job(job: Job, *, exclude: list[str] | None = None) -> None:
    """Model validation plus what only the registry knows: the function exists and accepts
    the job's arguments. Raises ``ValidationError`` keyed by field name."""
    errors: dict[str, list[str]] = {}
    try:
        job.full_clean(exclude=exclude)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    if "task" not in errors:
        if not registry.is_registered(job.task):
            known = ", ".join(registry.names()) or "none"
            errors["task"] = [f"{job.task!r} is not a registered job function (known: {known})."]
        else:
            errors.update(_argument_errors(job))
    if errors:
        raise ValidationError(errors)


def _argument_errors(job: Job) -> dict[str, list[str]]:
    if not isinstance(job.args, list):
        return {"args": ['Positional arguments must be a JSON list, e.g. [1, "a"].']}
    if not isinstance(job.kwargs, dict):
        return {"kwargs": ['Keyword arguments must be a JSON object, e.g. {"city": "Paris"}.']}
    func = registry.get(job.task).func
    try:
        inspect.signature(func).bind(None, *job.args, **job.kwargs)
    except TypeError as exc:
        return {"kwargs" if job.kwargs else "args": [f"{job.task} cannot take them: {exc}."]}
    return {}


@transaction.atomic
def create_job(definition: JobDefinition, *, managed_by_code: bool = False) -> Job:
    unknown = set(definition.policies) - set(POLICY_FIELDS)
    if unknown:
        raise ValidationError({name: ["Unknown policy."] for name in sorted(unknown)})
    job = Job(
        name=definition.name,
        task=definition.task,
        kind=JobKind.CONTINUOUS if definition.schedule is None else JobKind.PERIODIC,
        args=definition.args,
        kwargs=definition.kwargs,
        enabled=definition.enabled,
        managed_by_code=managed_by_code,
        **definition.policies,
    )
    validate_job(job)
    job.save()
    if definition.schedule is not None:
        job.periodic_task = beat_link.store(job, definition.schedule)
        job.save(update_fields=["periodic_task"])
    return job


@transaction.atomic
def save_job(job: Job, schedule: Schedule | None) -> Job:
    """Save an edited job (admin form, CLI) with its schedule; beats pick the change up."""
    job.kind = JobKind.CONTINUOUS if schedule is None else JobKind.PERIODIC
    old_task = job.periodic_task if schedule is None else None
    if schedule is None:
        job.periodic_task = None  # before validating: a continuous job has no beat entry
    validate_job(job)
    job.save()
    if schedule is not None:
        job.periodic_task = beat_link.store(job, schedule)
        job.save(update_fields=["periodic_task"])
    if old_task is not None:
        old_task.delete()
    return job


@transaction.atomic
def set_enabled(job: Job, enabled: bool) -> Job:
    job.enabled = enabled
    job.save(update_fields=["enabled", "updated_at"])
    beat_link.refresh(job)
    return job


def pause(name: str) -> Job:
    return set_enabled(get_job(name), False)


def resume(name: str) -> Job:
    return set_enabled(get_job(name), True)


@transaction.atomic
def remove(name: str) -> None:
    job = get_job(name)
    task = job.periodic_task
    job.delete()
    if task is not None:
        task.delete()


def run_now(name: str, trigger: Trigger = Trigger.MANUAL) -> JobRun:
    return trigger_now(get_job(name), trigger)


def run_once(
    name: str, idempotency_key: str, trigger: Trigger = Trigger.API
) -> tuple[JobRun, bool]:
    """``run_now`` at most once per ``idempotency_key``: the flag says whether a run was made."""
    return trigger_once(get_job(name), idempotency_key, trigger)


def release_lease(name: str) -> bool:
    """Force-release the job's lease; the token still grows on the next acquisition."""
    return lease.force_release(get_job(name).lock_key)
