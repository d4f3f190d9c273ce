"""The link between a job and django-celery-beat's models, which carry its schedule.

A periodic job owns one ``PeriodicTask`` whose interval / crontab (with time zone) / clocked
schedule *is* the job's schedule; this module is the only code that reads or writes that pairing.
Saving the ``PeriodicTask`` bumps django-celery-beat's change marker, which every beat watches.
"""

from __future__ import annotations

import json
from datetime import UTC

from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
)

from jobs.models import Job
from jobs.schedules import At, Cron, Every, Schedule

_PERIOD_SECONDS = {
    IntervalSchedule.DAYS: 86400,
    IntervalSchedule.HOURS: 3600,
    IntervalSchedule.MINUTES: 60,
    IntervalSchedule.SECONDS: 1,
    IntervalSchedule.MICROSECONDS: 1e-6,
}


def beat_entry_name(job_name: str) -> str:
    return f"job:{job_name}"


def schedule_of(task: PeriodicTask | None) -> Schedule | None:
    """The schedule a beat entry carries; ``None`` for a continuous job (no entry)."""
    if task is None:
        return None
    if task.interval is not None:
        seconds = int(task.interval.every * _PERIOD_SECONDS[task.interval.period])
        return Every(seconds=max(seconds, 1), anchor=task.start_time)
    if task.crontab is not None:
        c = task.crontab
        expr = f"{c.minute} {c.hour} {c.day_of_month} {c.month_of_year} {c.day_of_week}"
        return Cron(expr=expr, tz=str(c.timezone))
    if task.clocked is not None:
        return At(when=task.clocked.clocked_time)
    raise ValueError(f"beat entry {task.name!r} has no schedule")


def store(job: Job, schedule: Schedule) -> PeriodicTask:
    """Create or update the beat entry of ``job`` so it carries ``schedule`` and the job's
    enabled flag and queue. ``job`` must be saved; the caller saves ``job.periodic_task``."""
    task = job.periodic_task or PeriodicTask(name=beat_entry_name(job.name))
    task.name = beat_entry_name(job.name)
    task.task = job.task
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
    else:
        task.clocked = ClockedSchedule.objects.create(clocked_time=schedule.when.astimezone(UTC))
        task.one_off = True
    task.kwargs = json.dumps({"job": job.name})
    task.enabled = job.enabled
    task.queue = job.queue
    task.description = f"Schedule of job {job.name} (edit it on the job's page)."
    task.save()
    return task


def refresh(job: Job) -> None:
    """Re-save the beat entry after a job edit so every beat notices the change."""
    if job.periodic_task is not None:
        schedule = schedule_of(job.periodic_task)
        assert schedule is not None
        store(job, schedule)
