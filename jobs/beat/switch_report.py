"""The pre-switch report (``jobs adopt --dry-run``): every periodic task a Celery project
declares, from all three sources, what each becomes, its next slots as Celery computes them and as
the cluster will, and whatever changes or cannot be carried over. Writes nothing.

Sources: Celery's configuration (``beat_schedule`` / ``CELERY_BEAT_SCHEDULE`` /
``add_periodic_task``: ``jobs.beat.configured``) and django-celery-beat rows that no job owns
(``jobs.beat.adoption``). A row named like a configuration entry is that entry (stock
django-celery-beat writes one per entry) and is listed once, as the entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import schedules
from django_celery_beat.models import PeriodicTask

from jobs.beat import adoption, configured, entries
from jobs.models import Job
from jobs.schedule import slots
from jobs.schedule.kinds import Schedule, describe

CONFIGURATION = "celery configuration"
ROW = "django-celery-beat row"


@dataclass
class Line:
    source: str  # CONFIGURATION or ROW
    name: str  # the entry's key or the row's name
    task: str
    job: str = ""  # the job it becomes ("" when it cannot)
    schedule: str = ""  # the job's schedule in words
    celery_next: list[str] = field(default_factory=list)
    our_next: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    reason: str = ""  # why it cannot be carried over ("" when it can)

    @property
    def carried(self) -> bool:
        return not self.reason

    def record(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "name": self.name,
            "task": self.task,
            "carried": self.carried,
            "job": self.job,
            "schedule": self.schedule,
            "celery_next": self.celery_next,
            "our_next": self.our_next,
            "changes": self.changes,
            "reason": self.reason,
        }


def report(now: datetime | None = None, count: int = 3) -> list[Line]:
    now = now or datetime.now(UTC)
    lines = [_configuration_line(entry, now, count) for entry in configured.declared()]
    named = {line.job for line in lines} | {line.name for line in lines}
    owned = set(Job.objects.exclude(periodic_task=None).values_list("periodic_task_id", flat=True))
    rows = PeriodicTask.objects.select_related("interval", "crontab", "clocked", "solar")
    for row in rows.order_by("name"):
        if row.pk in owned or row.name in named:
            continue
        lines.append(_row_line(row, now, count))
    return lines


def not_carried() -> list[Line]:
    """The declared periodic tasks that do not run, each with the reason and what to do:
    configuration entries no job can carry, and enabled django-celery-beat rows that adoption
    refuses. The admin's job list and ``/healthz`` show them."""
    lines = [
        Line(CONFIGURATION, entry.key, entry.task, reason=entry.reason)
        for entry in configured.declared()
        if not entry.carried
    ]
    lines += [
        Line(ROW, verdict.name, verdict.task, reason=verdict.reason)
        for verdict in adoption.preview()
        if not verdict.adoptable and verdict.enabled  # a disabled one would not run either
    ]
    return lines


def _configuration_line(entry: configured.Declared, now: datetime, count: int) -> Line:
    line = Line(CONFIGURATION, entry.key, entry.task, changes=list(entry.notes))
    if not entry.carried:
        line.reason = entry.reason
        return line
    if entry.job_name != entry.key:
        line.changes.append(f"the job is named {entry.job_name!r} (a job name holds no '/')")
    row = PeriodicTask(name=entry.job_name, enabled=True, **entry.values)
    existing = Job.objects.filter(name=entry.job_name).first()
    # The row the beat would write, judged as adoption will judge it (an adopted job of that
    # name is the entry's already: stock beat wrote its row).
    verdict = adoption.judge(row) if existing is None else None
    if existing is not None and not existing.adopted:
        line.reason = adoption._name_taken(entry.job_name)
    elif verdict is not None and not verdict.adoptable:
        line.reason = verdict.reason
    if line.reason:
        return line
    _describe(line, row, entry.schedule, now, count)
    line.job = entry.job_name
    return line


def _row_line(row: PeriodicTask, now: datetime, count: int) -> Line:
    line = Line(ROW, row.name, row.task)
    verdict = adoption.judge(row)
    if not verdict.adoptable:
        line.reason = verdict.reason
        return line
    try:
        celery_schedule = row.schedule
    except Exception:  # the row's schedule cannot be read: adoption said so already
        celery_schedule = None
    _describe(line, row, celery_schedule, now, count)
    line.job = row.name
    if not row.enabled:
        line.changes.append("the entry is disabled: its job is paused (resume it to run it)")
    return line


def _describe(line: Line, row: PeriodicTask, celery_schedule: Any, now: datetime, n: int) -> None:
    ours = entries.schedule_of(row)
    assert ours is not None
    line.schedule = describe(ours)
    line.our_next = [_iso(slot) for slot in _our_next(ours, now, n)]
    line.celery_next = _celery_next(celery_schedule, now, n)
    # An interval's phase is said by the entry's notes (configured); others must agree.
    shared = min(len(line.celery_next), len(line.our_next))
    if not ours.phase_of_its_own and line.celery_next[:shared] != line.our_next[:shared]:
        line.changes.append("the next slots differ: see both lists")


def _our_next(schedule: Schedule, now: datetime, n: int) -> list[datetime]:
    found: list[datetime] = []
    current = now
    while len(found) < n:
        following = slots.next_slot(schedule, current)
        if following is None:
            break
        found.append(following)
        current = following
    return found


def _celery_next(schedule: Any, now: datetime, n: int) -> list[str]:
    """The next ``n`` due times as Celery's own schedule object computes them from ``now``
    (an interval: from a beat started ``now``)."""
    if schedule is None:
        return []
    found: list[str] = []
    # isinstance: a row's crontab is django-celery-beat's TzAwareCrontab, Celery's all the same.
    if isinstance(schedule, schedules.crontab):
        last = now
        for _ in range(n):
            start, delta, _now = schedule.remaining_delta(last)
            due = (start + delta).astimezone(UTC)
            found.append(_iso(due))
            last = due + timedelta(seconds=1) - timedelta(microseconds=due.microsecond)
        return found
    if isinstance(schedule, schedules.solar):
        due = schedule.now().astimezone(UTC) + schedule.remaining_estimate(now)
        return [_iso(due)]
    if isinstance(schedule, schedules.schedule):
        last = now
        for _ in range(n):
            due = _celery_interval_due(schedule, last)
            found.append(_iso(due))
            last = due
        return found
    return []


def _celery_interval_due(schedule: Any, last: datetime) -> datetime:
    from celery.utils.time import remaining

    # celery.schedules.schedule.remaining_estimate, with "now" at the last run.
    estimate = remaining(
        schedule.maybe_make_aware(last), schedule.run_every, last, schedule.relative
    )
    return (last + estimate).astimezone(UTC)


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
