"""Daylight saving time as a job's slots meet it: the offset changes of a zone between two
instants, and what each change does to a slot, in words that name the change in the job's zone
and in UTC. Pure, no I/O. The slots themselves come from the kind's maths (``jobs.schedule.cron``
has the rule: a wall time a gap swallows runs at the end of the gap, a repeated one at its first
pass); this module only says what they are.

Example::

    >>> slot = datetime(2027, 3, 28, 1, 0, tzinfo=UTC)  # "30 2 * * *" in Europe/Paris
    >>> previous = datetime(2027, 3, 27, 1, 30, tzinfo=UTC)
    >>> notes(Cron("30 2 * * *", "Europe/Paris"), slot, "Europe/Paris", previous=previous)
    ['spring forward in Europe/Paris on 2027-03-28: 02:00 CET becomes 03:00 CEST (01:00 UTC); '
     '02:30 does not exist that day: it runs at 03:00 CEST (01:00 UTC), the end of the gap']
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from jobs.schedule.kind import ScheduleKind

# Offsets are probed this far apart: no zone changes its offset twice within a week.
_PROBE = timedelta(days=7)
# How far before a slot a change still counts as crossed (a yearly slot names a year's changes).
_LOOK_BACK = timedelta(days=366)


@dataclass(frozen=True)
class Transition:
    """One offset change of ``zone`` at the UTC instant ``at``."""

    zone: str
    at: datetime
    offset_before: timedelta
    offset_after: timedelta
    name_before: str
    name_after: str

    @property
    def forward(self) -> bool:
        """Clocks go forward (a gap of wall times), rather than back (a repeated span)."""
        return self.offset_after > self.offset_before

    @property
    def wall_before(self) -> datetime:
        """The wall time the clocks read as the change comes (naive)."""
        return (self.at + self.offset_before).replace(tzinfo=None)

    @property
    def wall_after(self) -> datetime:
        """The wall time they read right after it (naive)."""
        return (self.at + self.offset_after).replace(tzinfo=None)

    def describe(self) -> str:
        turn = "spring forward" if self.forward else "fall back"
        return (
            f"{turn} in {self.zone} on {self.wall_before:%Y-%m-%d}: {self.wall_before:%H:%M} "
            f"{self.name_before} becomes {self.wall_after:%H:%M} {self.name_after} "
            f"({self.at:%H:%M} UTC)"
        )


def transitions(zone: str, after: datetime, until: datetime) -> list[Transition]:
    """The offset changes of ``zone`` at instants ``after < t <= until``, in order."""
    tz = ZoneInfo(zone)
    found: list[Transition] = []
    start = after
    while start < until:
        end = min(until, start + _PROBE)
        if _offset(start, tz) != _offset(end, tz):
            found.append(_transition(zone, tz, start, end))
        start = end
    return found


def notes(
    schedule: ScheduleKind, slot: datetime, zone: str, *, previous: datetime | None
) -> list[str]:
    """What DST does to ``slot`` in ``zone``: each change crossed since ``previous`` (the slot
    before it; ``None``: there is none, so nothing is crossed), and, for a schedule of wall
    times, a wall time the change moved to this slot (a gap) or that comes twice (a repeated
    span), with whether a second slot follows."""
    tz = ZoneInfo(zone)
    crossed = [] if previous is None else transitions(zone, max(previous, slot - _LOOK_BACK), slot)
    found: list[str] = []
    for change in crossed:
        words = change.describe()
        if change.forward and slot == change.at:
            words += _gap_words(schedule, change)
        found.append(words)
    repeated = _repeated_words(schedule, slot, tz)
    if repeated:
        found.append(repeated)
    return found


def _gap_words(schedule: ScheduleKind, change: Transition) -> str:
    if not schedule.time_zone:
        return ""
    walls = schedule.wall_times(change.wall_before, change.wall_after)
    if not walls:
        return ""
    missing = ", ".join(f"{wall:%H:%M}" for wall in walls)
    verb = "does" if len(walls) == 1 else "do"
    return (
        f"; {missing} {verb} not exist that day: it runs at {change.wall_after:%H:%M} "
        f"{change.name_after} ({change.at:%H:%M} UTC), the end of the gap"
    )


def _repeated_words(schedule: ScheduleKind, slot: datetime, tz: ZoneInfo) -> str:
    """Words for a slot whose wall time comes twice (clocks going back), or ""."""
    local = slot.astimezone(tz)
    wall = local.replace(tzinfo=None)
    first = wall.replace(tzinfo=tz, fold=0)
    second = wall.replace(tzinfo=tz, fold=1)
    if first.utcoffset() == second.utcoffset():
        return ""
    first_utc, second_utc = first.astimezone(UTC), second.astimezone(UTC)
    said = (
        f"{wall:%H:%M} comes twice on {wall:%Y-%m-%d} in {tz.key}: {first.tzname()} "
        f"({first_utc:%H:%M} UTC), then {second.tzname()} ({second_utc:%H:%M} UTC)"
    )
    if slot == second_utc:
        return f"{said}; this is the second"
    if schedule.latest_slot(second_utc) == second_utc:
        return f"{said}; this is the first, a slot at the second follows"
    return f"{said}; it runs once, at the first"


def _offset(instant: datetime, tz: ZoneInfo) -> timedelta | None:
    return instant.astimezone(tz).utcoffset()


def _transition(zone: str, tz: ZoneInfo, start: datetime, end: datetime) -> Transition:
    """The change between ``start`` and ``end`` (one only), found to the second: offsets change
    on whole seconds (TZif stores seconds)."""
    before, after = int(start.timestamp()), int(end.timestamp()) + 1
    new = _offset(end, tz)
    while after - before > 1:
        middle = (before + after) // 2
        if _offset(datetime.fromtimestamp(middle, UTC), tz) == new:
            after = middle
        else:
            before = middle
    at = datetime.fromtimestamp(after, UTC)
    old_local = (at - timedelta(seconds=1)).astimezone(tz)
    new_local = at.astimezone(tz)
    assert old_local.utcoffset() is not None and new_local.utcoffset() is not None
    return Transition(
        zone=zone,
        at=at,
        offset_before=old_local.utcoffset() or timedelta(0),
        offset_after=new_local.utcoffset() or timedelta(0),
        name_before=old_local.tzname() or "",
        name_after=new_local.tzname() or "",
    )
