"""Slot identity: the deterministic UTC instants at which a schedule is due. Pure, no I/O.

More in docs/architecture.md, "Module notes".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from jobs.schedule import cron, solar
from jobs.schedule.kinds import (
    At,
    Cron,
    Every,
    Schedule,
    Solar,
    canonical_cron,
)

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
        return cron.cron_latest(canonical_cron(schedule.expr), schedule.tz, now.astimezone(UTC))
    if isinstance(schedule, At):
        return schedule.when.astimezone(UTC) if schedule.when <= now else None
    if isinstance(schedule, Solar):
        return solar.latest(schedule, now)
    raise TypeError(f"not a schedule: {schedule!r}")


def next_slot(schedule: Schedule, now: datetime) -> datetime | None:
    """The first slot strictly after ``now``, or ``None`` if there will be none."""
    if isinstance(schedule, Every):
        anchor = schedule.anchor or EPOCH
        if now < anchor:
            return anchor
        step = timedelta(seconds=schedule.seconds)
        return anchor + ((now - anchor) // step + 1) * step
    if isinstance(schedule, Cron):
        return cron.cron_next(canonical_cron(schedule.expr), schedule.tz, now.astimezone(UTC))
    if isinstance(schedule, At):
        return schedule.when.astimezone(UTC) if schedule.when > now else None
    if isinstance(schedule, Solar):
        return solar.following(schedule, now)
    raise TypeError(f"not a schedule: {schedule!r}")


def previous_slot(schedule: Schedule, slot: datetime) -> datetime | None:
    """The newest slot strictly before ``slot``."""
    return latest_slot(schedule, slot - _ONE_MICROSECOND)


@dataclass(frozen=True)
class SlotWindow:
    """The slots in a window, newest ones listed, older ones (beyond a limit) only summarised."""

    slots: list[datetime]  # ascending; at most ``limit`` of them, the newest
    omitted: int  # how many older slots are not listed (0: the list is complete)
    omitted_first: datetime | None  # the oldest slot not listed
    omitted_count_exact: bool  # False when ``omitted`` only says "at least this many"


def slots_in(schedule: Schedule, after: datetime, until: datetime, limit: int) -> SlotWindow:
    """The slots ``s`` with ``after < s <= until``: the newest ``limit`` listed, the rest
    summarised, so that a week of a one-second schedule costs no more than ``limit`` slots."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    if isinstance(schedule, Every):
        return _interval_window(schedule, after, until, limit)
    newest_first: list[datetime] = []
    current = latest_slot(schedule, until)
    while current is not None and current > after and len(newest_first) < limit:
        newest_first.append(current)
        current = previous_slot(schedule, current)
    if current is None or current <= after:
        return SlotWindow(newest_first[::-1], 0, None, True)
    # More, older slots: say so and where they start, without enumerating them all.
    return SlotWindow(newest_first[::-1], 1, next_slot(schedule, after), False)


def _interval_window(schedule: Every, after: datetime, until: datetime, limit: int) -> SlotWindow:
    first, last = next_slot(schedule, after), latest_slot(schedule, until)
    if first is None or last is None or last < first:
        return SlotWindow([], 0, None, True)
    step = timedelta(seconds=schedule.seconds)
    count = (last - first) // step + 1
    listed = min(count, limit)
    slots = [last - step * i for i in range(listed - 1, -1, -1)]
    omitted = count - listed
    return SlotWindow(slots, omitted, first if omitted else None, True)


def period_after(schedule: Schedule, slot: datetime) -> timedelta | None:
    """How long after ``slot`` the next slot comes (``None`` if none does)."""
    following = next_slot(schedule, slot)
    return None if following is None else following - slot
