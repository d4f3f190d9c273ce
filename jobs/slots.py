"""Slot identity: the deterministic UTC instants at which a schedule is due. Pure, no I/O.

Every beat computes the same slot for the same due instant, so the database's unique
``(job, scheduled_for)`` makes the first beat's insert win and the others' a no-op. Interval
slots are anchored (to the schedule's anchor or the Unix epoch), never "last run + interval",
so beats that started at different times still agree.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from croniter import croniter

from jobs.schedules import At, Cron, Every, Schedule, validate_timezone

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MICROSECOND = timedelta(microseconds=1)


def latest_slot(schedule: Schedule, now: datetime) -> datetime | None:
    """The newest slot at or before ``now``, or ``None`` if the schedule has not begun."""
    if isinstance(schedule, Every):
        anchor = schedule.anchor or EPOCH
        if now < anchor:
            return None
        step = timedelta(seconds=schedule.seconds)
        return anchor + ((now - anchor) // step) * step
    if isinstance(schedule, Cron):
        zone = validate_timezone(schedule.tz)
        # croniter's get_prev is strictly before its start; nudge so an exact hit counts.
        start = (now + _ONE_MICROSECOND).astimezone(zone)
        previous: datetime = croniter(schedule.expr, start).get_prev(datetime)
        return previous.astimezone(UTC)
    return schedule.when.astimezone(UTC) if schedule.when <= now else None


def next_slot(schedule: Schedule, now: datetime) -> datetime | None:
    """The first slot strictly after ``now``, or ``None`` if there will be none."""
    if isinstance(schedule, Every):
        anchor = schedule.anchor or EPOCH
        if now < anchor:
            return anchor
        step = timedelta(seconds=schedule.seconds)
        return anchor + ((now - anchor) // step + 1) * step
    if isinstance(schedule, Cron):
        zone = validate_timezone(schedule.tz)
        following: datetime = croniter(schedule.expr, now.astimezone(zone)).get_next(datetime)
        return following.astimezone(UTC)
    if isinstance(schedule, At):
        return schedule.when.astimezone(UTC) if schedule.when > now else None
    raise TypeError(f"not a schedule: {schedule!r}")
