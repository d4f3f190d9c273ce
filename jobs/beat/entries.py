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
from datetime import UTC
from typing import Any

from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)

from jobs.models import Job
from jobs.schedule.kinds import At, Cron, Every, Schedule, Solar

_PERIOD_SECONDS = {
    IntervalSchedule.DAYS: 86400,
    IntervalSchedule.HOURS: 3600,
    IntervalSchedule.MINUTES: 60,
    IntervalSchedule.SECONDS: 1,
    IntervalSchedule.MICROSECONDS: 1e-6,
}


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
    if task.interval is not None:
        period = _PERIOD_SECONDS.get(task.interval.period)
        if period is None:
            raise ValueError(f"the interval's period {task.interval.period!r} is not a known unit")
        seconds = int(task.interval.every * period)
        if seconds < 1:
            raise ValueError(f"an interval of {task.interval} is shorter than one second")
        return Every(seconds=seconds, anchor=task.start_time)
    if task.crontab is not None:
        c = task.crontab
        expr = f"{c.minute} {c.hour} {c.day_of_month} {c.month_of_year} {c.day_of_week}"
        return Cron(expr=expr, tz=str(c.timezone))
    if task.clocked is not None:
        return At(when=task.clocked.clocked_time)
    if task.solar is not None:
        sun = task.solar
        return Solar(event=sun.event, latitude=float(sun.latitude), longitude=float(sun.longitude))
    raise ValueError(f"beat entry {task.name!r} has no schedule")


def store(job: Job, schedule: Schedule) -> PeriodicTask:
    """Create or update the beat entry of ``job`` so it carries ``schedule`` and the job's
    enabled flag and queue. ``job`` must be saved; the caller saves ``job.periodic_task``."""
    task = job.periodic_task or PeriodicTask(name=beat_entry_name(job.name))
    task.interval = task.crontab = task.clocked = task.solar = None
    task.one_off = False
    task.start_time = None
    if isinstance(schedule, Every):
        task.interval, _ = IntervalSchedule.objects.get_or_create(
            every=schedule.seconds, period=IntervalSchedule.SECONDS
        )
        task.start_time = schedule.anchor
    elif isinstance(schedule, Cron):
        minute, hour, day_of_month, month_of_year, day_of_week = schedule.fields
        task.crontab, _ = CrontabSchedule.objects.get_or_create(
            minute=minute,
            hour=hour,
            day_of_month=day_of_month,
            month_of_year=month_of_year,
            day_of_week=day_of_week,
            timezone=schedule.tz,
        )
    elif isinstance(schedule, Solar):
        task.solar, _ = SolarSchedule.objects.get_or_create(
            event=schedule.event, latitude=schedule.latitude, longitude=schedule.longitude
        )
    else:
        task.clocked = ClockedSchedule.objects.create(clocked_time=schedule.when.astimezone(UTC))
        task.one_off = True
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
