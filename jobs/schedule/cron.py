"""Slots of a cron expression in a time zone: the instants of the wall-clock minutes Celery's
crontab matches, with the DST rule (a skipped time runs at the end of the gap, a repeated one
at its first pass). Pure, no I/O.

More in docs/architecture.md, "Module notes".
"""

from __future__ import annotations

import math
import zoneinfo
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from croniter import CroniterBadDateError, croniter

_ONE_MICROSECOND = timedelta(microseconds=1)
# Matching wall times skipped while walking past a repeated hour: at most one per minute of it.
# Far above any real zone's overlap; hitting it means a bug, not a schedule.
_MAX_WALK = 10_000

# A slot is a wall-clock minute that Celery's crontab matches: ``expr`` is ``canonical_cron``'s
# form of what was typed (Celery's reading of each field, written out for croniter), and
# croniter evaluates it with ``day_or=False``, so every field must match, day of month and day
# of week included, as in Celery (croniter's default is Unix cron's OR of the two day fields).
# Cached: thousands of jobs often share an expression and are asked about the same instant
# (at start-up, or when they all fire at one slot), and croniter costs ~0.1 ms per call.


@lru_cache(maxsize=8192)
def cron_next(expr: str, tz: str, now: datetime) -> datetime:
    zone = zoneinfo.ZoneInfo(tz)  # validated by the Cron value
    wall = _wall(now, zone)
    # instant(wall) <= now, and the mapping is non-decreasing: no earlier wall time can qualify.
    matches = croniter(expr, _as_fake_utc(wall), day_or=False)
    for _ in range(_MAX_WALK):
        candidate = _instant(_as_naive(_never_fires_if_raises(matches.get_next, expr)), zone)
        if candidate > now:
            return candidate
    raise RuntimeError(f"no slot of {expr!r} in {tz} after {now.isoformat()}")  # pragma: no cover


@lru_cache(maxsize=8192)
def cron_latest(expr: str, tz: str, now: datetime) -> datetime:
    zone = zoneinfo.ZoneInfo(tz)  # validated by the Cron value
    local = now.astimezone(zone)
    start = local.replace(tzinfo=None)
    if local.fold:
        # ``now`` is in the second pass of a repeated hour: wall times up to one DST shift
        # later still mean their first pass, which is at or before ``now``.
        first_offset = local.replace(fold=0).utcoffset()
        second_offset = local.utcoffset()
        assert first_offset is not None and second_offset is not None
        start += first_offset - second_offset
    # croniter's get_prev is strictly before its start; nudge so an exact hit counts.
    matches = croniter(expr, _as_fake_utc(start + _ONE_MICROSECOND), day_or=False)
    for _ in range(_MAX_WALK):
        candidate = _instant(_as_naive(_never_fires_if_raises(matches.get_prev, expr)), zone)
        if candidate <= now:
            return candidate
    raise RuntimeError(f"no slot of {expr!r} in {tz} before {now.isoformat()}")  # pragma: no cover


def cron_walls(expr: str, start: datetime, end: datetime) -> list[datetime]:
    """The wall-clock minutes ``start <= w < end`` (naive) that ``expr`` matches, whether or not
    they exist in a zone (a DST gap) or exist twice (a repeated hour)."""
    matches = croniter(expr, _as_fake_utc(start - _ONE_MICROSECOND), day_or=False)
    found: list[datetime] = []
    while len(found) < _MAX_WALK:
        wall = _as_naive(_never_fires_if_raises(matches.get_next, expr))
        if wall >= end:
            break
        found.append(wall)
    return found


def _never_fires_if_raises(step: Callable[[type[datetime]], datetime], expr: str) -> datetime:
    try:
        return step(datetime)
    except CroniterBadDateError:
        # croniter gives up after decades without a match: a date that never comes (31 Feb).
        raise ValueError(f"{expr!r} never fires: no date matches it") from None


def _wall(instant: datetime, zone: zoneinfo.ZoneInfo) -> datetime:
    """The local wall-clock time of ``instant`` in ``zone``, naive."""
    return instant.astimezone(zone).replace(tzinfo=None)


def _instant(wall: datetime, zone: zoneinfo.ZoneInfo) -> datetime:
    """The DST rule: the UTC instant at which the local wall-clock time ``wall`` runs."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if _wall(first, zone) == wall:
        return first  # it exists; for a repeated time, fold=0 is its first occurrence
    return _gap_end(wall, zone)


def _gap_end(wall: datetime, zone: zoneinfo.ZoneInfo) -> datetime:
    """The first instant after the DST gap that swallowed ``wall``: the transition itself."""
    # Read with the offsets before and after the transition, ``wall`` gives two instants that
    # bracket it. Offsets change on whole seconds (TZif stores seconds), so bisect on seconds.
    readings = sorted(wall.replace(tzinfo=zone, fold=fold).astimezone(UTC) for fold in (0, 1))
    before = math.floor(readings[0].timestamp())
    after = math.ceil(readings[1].timestamp())
    new_offset = _offset_at(after, zone)
    while after - before > 1:
        middle = (before + after) // 2
        if _offset_at(middle, zone) == new_offset:
            after = middle
        else:
            before = middle
    return datetime.fromtimestamp(after, UTC)


def _offset_at(timestamp: int, zone: zoneinfo.ZoneInfo) -> timedelta | None:
    return datetime.fromtimestamp(timestamp, UTC).astimezone(zone).utcoffset()


def _as_fake_utc(wall: datetime) -> datetime:
    # croniter on a UTC datetime does plain wall-clock arithmetic: no DST to interfere.
    return wall.replace(tzinfo=UTC)


def _as_naive(value: datetime) -> datetime:
    return value.replace(tzinfo=None)
