"""Catch-up: what becomes of slots that no beat fired in time. Pure, no I/O.

More in docs/architecture.md, "Module notes".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from jobs.models import CatchUp
from jobs.schedule.kinds import Schedule
from jobs.schedule.slots import SlotWindow, latest_slot, period_after, slots_in

MAX_MISSED_RECORDED = 1000
CURRENT_SLOT_GRACE = timedelta(seconds=5)

NO_BEAT = "no beat was running at its slot"
FELL_BEHIND = "the beat fell behind by more than the start deadline (paused or without database)"


@dataclass(frozen=True)
class Plan:
    run: datetime | None  # the slot to fire now, if any
    missed: list[tuple[datetime, str]]  # slots to record missed, with the reason
    handled_until: datetime  # the beat's next slot is the first one after this


def plan(
    schedule: Schedule,
    *,
    after: datetime,
    now: datetime,
    policy: str,
    start_deadline: float,
    why: str,
) -> Plan:
    """What to do with the slots ``s`` with ``after < s <= now`` that nobody fired."""
    newest = latest_slot(schedule, now)
    if newest is None or newest <= after:
        return Plan(run=None, missed=[], handled_until=after)
    window = slots_in(schedule, after, newest, MAX_MISSED_RECORDED)
    older = window.slots[:-1]
    age = now - newest
    within_deadline = age <= timedelta(seconds=start_deadline)
    if policy == CatchUp.NONE:
        # The current slot still runs within its grace, but never past the job's start deadline:
        # the worker would only record it missed.
        run_newest = age < _grace(schedule, newest) and within_deadline
        reason = f"{why}; catch-up policy none runs nothing late"
        newest_reason = reason
    else:
        run_newest = within_deadline
        reason = f"{why}; catch-up policy latest runs only the newest missed slot"
        newest_reason = (
            f"{why}; the newest missed slot, but past its start deadline of {start_deadline:g} s"
        )
    missed = [(slot, reason) for slot in older]
    if not run_newest:
        missed.append((newest, newest_reason))
    if window.omitted and missed:
        oldest, text = missed[0]
        missed[0] = (oldest, text + _summary(window))
    return Plan(run=newest if run_newest else None, missed=missed, handled_until=newest)


def _grace(schedule: Schedule, slot: datetime) -> timedelta:
    period = period_after(schedule, slot)
    return CURRENT_SLOT_GRACE if period is None else min(CURRENT_SLOT_GRACE, period / 2)


def _summary(window: SlotWindow) -> str:
    first = window.omitted_first
    since = "" if first is None else f" from {first.isoformat()} on"
    count = f"{window.omitted} earlier slot(s)" if window.omitted_count_exact else "earlier slots"
    return f" (and {count}{since} were missed too, not recorded one by one)"
