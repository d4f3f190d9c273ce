"""Slot identity: the deterministic UTC instants at which a schedule is due. Pure, no I/O.

Each kind carries its own maths (``jobs.schedule.kind.ScheduleKind``); these are the questions
the rest of the app asks of any schedule, built on the kind's ``latest_slot`` and ``next_slot``.
More in docs/architecture.md, "Module notes".
"""

from __future__ import annotations

from datetime import datetime, timedelta

from jobs.schedule.kind import ScheduleKind, SlotWindow
from jobs.schedule.kinds import EPOCH

__all__ = [
    "EPOCH",
    "SlotWindow",
    "latest_slot",
    "next_slot",
    "period_after",
    "previous_slot",
    "slots_in",
]

_ONE_MICROSECOND = timedelta(microseconds=1)


def latest_slot(schedule: ScheduleKind, now: datetime) -> datetime | None:
    """The newest slot at or before ``now``, or ``None`` if the schedule has not begun."""
    return schedule.latest_slot(now)


def next_slot(schedule: ScheduleKind, now: datetime) -> datetime | None:
    """The first slot strictly after ``now``, or ``None`` if there will be none."""
    return schedule.next_slot(now)


def previous_slot(schedule: ScheduleKind, slot: datetime) -> datetime | None:
    """The newest slot strictly before ``slot``."""
    return schedule.latest_slot(slot - _ONE_MICROSECOND)


def slots_in(schedule: ScheduleKind, after: datetime, until: datetime, limit: int) -> SlotWindow:
    """The slots ``s`` with ``after < s <= until``: the newest ``limit`` listed, the rest
    summarised, so that a week of a one-second schedule costs no more than ``limit`` slots."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    counted = schedule.window(after, until, limit)
    if counted is not None:
        return counted
    newest_first: list[datetime] = []
    current = schedule.latest_slot(until)
    while current is not None and current > after and len(newest_first) < limit:
        newest_first.append(current)
        current = previous_slot(schedule, current)
    if current is None or current <= after:
        return SlotWindow(newest_first[::-1], 0, None, True)
    # More, older slots: say so and where they start, without enumerating them all.
    return SlotWindow(newest_first[::-1], 1, schedule.next_slot(after), False)


def period_after(schedule: ScheduleKind, slot: datetime) -> timedelta | None:
    """How long after ``slot`` the next slot comes (``None`` if none does)."""
    following = schedule.next_slot(slot)
    return None if following is None else following - slot
