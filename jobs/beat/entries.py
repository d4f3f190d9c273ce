"""The link between a job and django-celery-beat's models, which carry its schedule.

A periodic job owns one ``PeriodicTask`` whose interval / crontab (with time zone) / clocked
schedule *is* the job's schedule; this module is the only code that reads or writes that pairing.
The platform names its own entries ``job:<name>``; an adopted job (``jobs.beat.adoption``) owns
the project's row as it was, and this module keeps that row holding the job's values.
Saving the ``PeriodicTask`` bumps django-celery-beat's change marker, which every beat watches.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django_celery_beat.models import CrontabSchedule, PeriodicTask

from jobs.models import Job
from jobs.schedule import kind
from jobs.schedule.kinds import Schedule


def read_time_zones_leniently() -> None:
    """Keep a crontab row's time zone as its raw text when it names no zone.

    django-celery-beat parses the zone whenever a row is loaded, so one corrupted row (written
    around validation) would make every query that loads crontab rows raise: every beat and
    every page that lists schedules. Kept as text, only that row's job fails, in
    ``schedule_of``. Zones are validated before they reach the row (``jobs.schedule.kinds``).
    """
    field = CrontabSchedule._meta.get_field("timezone")
    if getattr(field, "_jobs_lenient", False):
        return
    for method in ("from_db_value", "to_python"):
        setattr(field, method, _lenient(getattr(field, method)))
    field._jobs_lenient = True


def _lenient(parse: Callable[..., Any]) -> Callable[..., Any]:
    def lenient(value: Any, *args: Any) -> Any:
        try:
            return parse(value, *args)
        except Exception:
            return value

    return lenient


def beat_entry_name(job_name: str) -> str:
    return f"job:{job_name}"


def schedule_of(task: PeriodicTask | None) -> Schedule | None:
    """The schedule a beat entry carries; ``None`` for a continuous job (no entry)."""
    if task is None:
        return None
    return kind.from_row(task)  # each kind reads its own rows


def store(job: Job, schedule: Schedule) -> PeriodicTask:
    """Create or update the beat entry of ``job`` so it carries ``schedule`` and the job's
    enabled flag and queue. ``job`` must be saved; the caller saves ``job.periodic_task``."""
    task = job.periodic_task or PeriodicTask(name=beat_entry_name(job.name))
    task.interval = task.crontab = task.clocked = task.solar = None
    task.one_off = False
    task.start_time = None
    row = schedule.row()  # the kind says which row carries it
    model = PeriodicTask._meta.get_field(row.field).related_model
    assert model is not None and not isinstance(model, str)
    manager = model._default_manager
    carrier = manager.get_or_create(**row.values)[0] if row.shared else manager.create(**row.values)
    setattr(task, row.field, carrier)
    for name, value in row.task_values.items():
        setattr(task, name, value)
    _copy_job_fields(job, task)
    return task


def refresh(job: Job) -> None:
    """Re-save the beat entry after a job edit so every beat notices the change. The schedule
    rows are left as they are: a job whose schedule cannot be read can still be paused."""
    if job.periodic_task is not None:
        _copy_job_fields(job, job.periodic_task)


def _copy_job_fields(job: Job, task: PeriodicTask) -> None:
    if job.adopted:
        _mirror(job, task)
    else:
        task.name = beat_entry_name(job.name)
        task.task = job.task
        task.kwargs = json.dumps({"job": job.name})
        task.enabled = job.enabled
        task.queue = job.queue
        task.description = f"Schedule of job {job.name} (edit it on the job's page)."
    task.save()


def _mirror(job: Job, task: PeriodicTask) -> None:
    """An adopted job's entry is the project's own row (``jobs.beat.adoption``): it keeps its name
    and holds the job's values, so code or a return to django-celery-beat's scheduler reads
    what the job runs."""
    task.name = job.name
    task.task = job.task
    task.args = json.dumps(job.args)
    task.kwargs = json.dumps(job.kwargs)
    task.headers = json.dumps(job.headers)
    task.enabled = job.enabled
    task.queue = job.queue
    task.exchange = job.exchange or None
    task.routing_key = job.routing_key or None
    task.priority = job.priority
    task.description = job.description
    task.expires = job.expires_at
    task.one_off = job.one_off or task.clocked_id is not None
    if task.expire_seconds:  # the start deadline came from it
        task.expire_seconds = job.start_deadline
