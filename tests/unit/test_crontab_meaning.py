"""A cron expression means what Celery's crontab means: the slots are the wall-clock minutes that
Celery's ``crontab`` matches in the schedule's zone, day of month AND day of week (Unix cron, and
croniter by default, run on either when both are restricted).

The oracle is Celery itself: django-celery-beat's ``TzAwareCrontab`` (what stock beat builds from
a crontab row) enumerates its matches with ``remaining_delta``, the method its ``is_due`` uses,
on a wall clock tagged UTC (so Celery sees no DST). Our slots come from the path adopted rows and
``jobs add --cron`` take: ``Cron(expr, tz)`` and ``next_slot`` iterated; they are compared in the
zone's wall time. On a DST transition day the documented DST rule applies instead (a wall time in
the spring gap runs at the gap's end; a repeated one runs once, at its first occurrence): that is
checked against Celery's wall-time matches of the day separately.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from functools import cache
from itertools import pairwise

import pytest
from croniter import croniter
from django_celery_beat.tzcrontab import TzAwareCrontab
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from jobs.schedule.kinds import CRON_HORIZON_YEARS, Cron, canonical_cron, describe
from jobs.schedule.slots import next_slot

ZONES = ["Europe/Paris", "America/Los_Angeles", "Australia/Sydney", "UTC", "Asia/Kolkata"]
WALL_CLOCK = zoneinfo.ZoneInfo("UTC")  # Celery's frame: wall times tagged UTC, no DST
MATCHES = 150  # at most this many of Celery's matches per example, the first ones
YEAR = timedelta(days=365)

DAY_NAMES = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
FULL_DAY_NAMES = ["sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"]
MONTH_NAMES = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
FULL_MONTH_NAMES = [
    "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december",
]  # fmt: skip


# --- the oracle: Celery's crontab -------------------------------------------------------------


def celery_crontab(expr: str) -> TzAwareCrontab:
    minute, hour, day_of_month, month_of_year, day_of_week = expr.split()
    return TzAwareCrontab(
        minute=minute,
        hour=hour,
        day_of_week=day_of_week,
        day_of_month=day_of_month,
        month_of_year=month_of_year,
        tz=WALL_CLOCK,
    )


def celery_walls(schedule: TzAwareCrontab, after: datetime) -> Iterator[datetime]:
    """The wall times (naive) Celery's crontab runs at after ``after`` (a naive wall time), in
    order: each the last one plus ``remaining_delta``'s answer, as Celery computes a next run."""
    current = after.replace(tzinfo=WALL_CLOCK)
    while True:
        last_run_at, delta, _ = schedule.remaining_delta(current, tz=WALL_CLOCK)
        following = last_run_at + delta
        assert following > current
        current = following
        yield current.replace(tzinfo=None)


def celery_matches(schedule: TzAwareCrontab, after: datetime, until: datetime) -> list[datetime]:
    """Celery's wall times in (after, until], at most ``MATCHES`` of them."""
    found: list[datetime] = []
    for wall in celery_walls(schedule, after):
        if wall > until or len(found) == MATCHES:
            break
        found.append(wall)
    return found


# --- Celery's crontab syntax, every form its parser reads ------------------------------------


def _token(draw: st.DrawFn, low: int, high: int, names: list[list[str]]) -> str:
    value = draw(st.integers(low, high))
    form = draw(st.sampled_from(["number", "padded", *(["name"] if names else [])]))
    if form == "padded":
        return f"{value:02d}"
    if form == "name":
        name = draw(st.sampled_from(names))[value - low]
        return draw(st.sampled_from([name, name.upper(), name.capitalize()]))
    return str(value)


@st.composite
def celery_field(
    draw: st.DrawFn, low: int, high: int, names: list[list[str]], sparse: bool = False
) -> str:
    """One field as Celery's ``crontab_parser`` reads it: ``*``, ``*/n``, values, ranges (those
    that wrap around too, e.g. ``fri-mon``) and ranges with steps, in a list."""
    if sparse and draw(st.booleans()):  # few values: the matches then span more days
        values = draw(st.lists(st.integers(low, high), min_size=1, max_size=2, unique=True))
        return ",".join(map(str, values))
    if draw(st.integers(0, 3)) == 0:
        return "*"
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["star_step", "value", "range", "range_step"]))
        if kind == "star_step":
            parts.append(f"*/{draw(st.integers(1, high - low + 2))}")
        elif kind == "value":
            parts.append(_token(draw, low, high, names))
        else:
            # Any two ends: the second may be lower than the first (a range that wraps).
            ends = f"{_token(draw, low, high, names)}-{_token(draw, low, high, names)}"
            step = f"/{draw(st.integers(1, high - low + 1))}" if kind == "range_step" else ""
            parts.append(ends + step)
    return ",".join(parts)


@st.composite
def celery_expressions(draw: st.DrawFn) -> str:
    minute = draw(celery_field(0, 59, [], sparse=True))
    hour = draw(celery_field(0, 23, [], sparse=True))
    # Each day field is "*" a quarter of the time: both are restricted in about half the examples.
    day_of_month = draw(celery_field(1, 31, []))
    month = draw(st.one_of(st.just("*"), celery_field(1, 12, [MONTH_NAMES, FULL_MONTH_NAMES])))
    day_of_week = draw(celery_field(0, 6, [DAY_NAMES, FULL_DAY_NAMES]))
    return f"{minute} {hour} {day_of_month} {month} {day_of_week}"


# --- the zone's DST transition days ------------------------------------------------------------


def offset_changes_on(day: date, zone: zoneinfo.ZoneInfo) -> bool:
    start = datetime.combine(day, time(), zone)
    end = datetime.combine(day + timedelta(days=1), time(), zone)
    return start.utcoffset() != end.utcoffset()


def by_the_dst_rule(wall: datetime, zone: zoneinfo.ZoneInfo) -> datetime:
    """The documented rule, for the transition days: the first occurrence of a wall time that
    exists, the end of the gap (the transition instant) for one that does not."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if first.astimezone(zone).replace(tzinfo=None) == wall:
        return first
    # Read with the offsets before and after the change, the wall time gives two instants that
    # bracket it; the zones here change offset on whole minutes.
    readings = sorted(wall.replace(tzinfo=zone, fold=fold).astimezone(UTC) for fold in (0, 1))
    new_offset = readings[1].astimezone(zone).utcoffset()
    instant = readings[0]
    while instant.astimezone(zone).utcoffset() != new_offset:
        instant += timedelta(minutes=1)
    return instant


@cache
def transitions(tz: str, year: int) -> tuple[datetime, ...]:
    """The instants in ``year`` at which ``tz`` changes its offset, to the minute."""
    zone = zoneinfo.ZoneInfo(tz)
    found = []
    current, end, step = (
        datetime(year, 1, 1, tzinfo=UTC),
        datetime(year + 1, 1, 1, tzinfo=UTC),
        timedelta(hours=6),
    )
    while current < end:
        before, after = current, current + step
        if before.astimezone(zone).utcoffset() != after.astimezone(zone).utcoffset():
            while after - before > timedelta(minutes=1):
                middle = before + (after - before) / 2
                if middle.astimezone(zone).utcoffset() == before.astimezone(zone).utcoffset():
                    before = middle
                else:
                    after = middle
            found.append(after)
        current += step
    return tuple(found)


@st.composite
def zones_and_starts(draw: st.DrawFn) -> tuple[str, datetime]:
    """A zone and a start (a naive wall time there): anywhere, or in half the examples the
    evening before a DST transition, so that the compared matches cross it."""
    tz = draw(st.sampled_from(ZONES))
    year = draw(st.integers(2021, 2034))
    changes = transitions(tz, year)
    near_a_change = draw(st.booleans())
    if changes and near_a_change:
        change = draw(st.sampled_from(changes)).astimezone(zoneinfo.ZoneInfo(tz))
        midnight = datetime.combine(change.date(), time())
        return tz, midnight - timedelta(minutes=draw(st.integers(1, 300)))
    return tz, draw(st.datetimes(min_value=datetime(year, 1, 1), max_value=datetime(year, 12, 31)))


# --- the property ------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=celery_expressions(), zone_and_start=zones_and_starts())
def test_slots_are_the_minutes_celerys_crontab_matches(
    expr: str, zone_and_start: tuple[str, datetime]
) -> None:
    tz, start = zone_and_start
    try:
        oracle = celery_crontab(expr)
    except ValueError:
        # Celery refuses a day the months never have (31 February): so do we.
        with pytest.raises(ValueError, match="never fires"):
            Cron(expr, tz)
        return
    # croniter reads the canonical form as Celery's parser read the fields.
    expanded = croniter.expand(canonical_cron(expr))[0]
    celery_values = [
        oracle.minute, oracle.hour, oracle.day_of_month, oracle.month_of_year, oracle.day_of_week,
    ]  # fmt: skip
    everything = [range(60), range(24), range(1, 32), range(1, 13), range(7)]
    for read, meant, full in zip(expanded, celery_values, everything, strict=True):
        assert set(full if read == ["*"] else read) == set(meant)

    zone = zoneinfo.ZoneInfo(tz)
    start_utc = start.replace(tzinfo=zone).astimezone(UTC)
    start_wall = start_utc.astimezone(zone).replace(tzinfo=None)
    try:
        schedule = Cron(expr, tz)
    except ValueError as refused:
        # Only a schedule that fires less often than every few years is refused.
        assert "never fires" in str(refused)
        today = datetime.combine(datetime.now(UTC).date(), time())
        first = next(celery_walls(oracle, today))
        assert first > today + timedelta(days=365 * (CRON_HORIZON_YEARS - 1))
        return

    expected = celery_matches(oracle, start_wall, start_wall + YEAR)
    fields = expr.split()
    event("both day fields restricted" if "*" not in (fields[2], fields[4]) else "not both")
    event(
        f"matches: {'none' if not expected else 'capped' if len(expected) == MATCHES else 'some'}"
    )
    horizon = expected[-1] if len(expected) == MATCHES else start_wall + YEAR
    found: list[datetime] = []  # our slots, UTC, up to the instant of Celery's last wall time
    current, last = next_slot(schedule, start_utc), by_the_dst_rule(horizon, zone)
    while current is not None and current <= last:
        found.append(current)
        current = next_slot(schedule, current)
        assert len(found) <= 2 * MATCHES

    def wall_of(instant: datetime) -> datetime:
        return instant.astimezone(zone).replace(tzinfo=None)

    transition_days = {
        wall.date()
        for wall in [*expected, *map(wall_of, found)]
        if offset_changes_on(wall.date(), zone)
    }
    ours = [wall_of(slot) for slot in found if wall_of(slot).date() not in transition_days]
    celery = [wall for wall in expected if wall.date() not in transition_days]
    assert ours == celery
    assert all(a < b for a, b in pairwise(found))

    # A transition day after the start's: each of Celery's wall times runs by the DST rule (the
    # gap's times at its end, a repeated time once).
    for day in transition_days:
        if day <= start_wall.date():
            continue
        walls = [wall for wall in expected if wall.date() == day]
        event("a transition day with matches" if walls else "a transition day without")
        by_rule = sorted({by_the_dst_rule(wall, zone) for wall in walls})
        assert [slot for slot in found if wall_of(slot).date() == day] == by_rule


# --- by example --------------------------------------------------------------------------------


def slots_between(schedule: Cron, start: datetime, end: datetime) -> list[datetime]:
    found: list[datetime] = []
    current = next_slot(schedule, start - timedelta(microseconds=1))
    while current is not None and current < end:
        found.append(current)
        current = next_slot(schedule, current)
    return found


def test_first_monday_of_the_month_runs_twelve_times_a_year() -> None:
    paris = zoneinfo.ZoneInfo("Europe/Paris")
    start = datetime(2027, 1, 1, tzinfo=paris)
    found = slots_between(
        Cron("0 9 1-7 * 1", "Europe/Paris"), start, datetime(2028, 1, 1, tzinfo=paris)
    )
    walls = [slot.astimezone(paris) for slot in found]
    assert len(found) == 12  # Unix cron would run 124 times: every Monday and every 1st-7th
    assert [wall.month for wall in walls] == list(range(1, 13))
    assert all(wall.weekday() == 0 and wall.day <= 7 and wall.hour == 9 for wall in walls)
    celery = celery_matches(
        celery_crontab("0 9 1-7 * 1"),
        datetime(2026, 12, 31, 23, 59),
        datetime(2027, 12, 31, 23, 59),
    )
    assert [wall.replace(tzinfo=None) for wall in walls] == celery


def test_friday_the_13th_runs_as_often_as_in_celery() -> None:
    found = slots_between(
        Cron("0 0 13 * 5", "UTC"),
        datetime(2027, 1, 1, tzinfo=UTC),
        datetime(2031, 1, 1, tzinfo=UTC),
    )
    celery = celery_matches(
        celery_crontab("0 0 13 * 5"), datetime(2026, 12, 31, 23, 59), datetime(2030, 12, 31, 23, 59)
    )
    assert [slot.replace(tzinfo=None) for slot in found] == celery
    # August 2027, October 2028, April and July 2029, September and December 2030.
    assert [(slot.year, slot.month) for slot in found] == [
        (2027, 8), (2028, 10), (2029, 4), (2029, 7), (2030, 9), (2030, 12),
    ]  # fmt: skip


def test_one_unrestricted_day_field_leaves_the_other_alone() -> None:
    # day_or=False with a "*" day field: the other one alone decides, as in Celery.
    mondays = slots_between(
        Cron("0 9 * * 1"), datetime(2027, 1, 1, tzinfo=UTC), datetime(2028, 1, 1, tzinfo=UTC)
    )
    firsts = slots_between(
        Cron("0 9 1-7 * *"), datetime(2027, 1, 1, tzinfo=UTC), datetime(2028, 1, 1, tzinfo=UTC)
    )
    assert (len(mondays), len(firsts)) == (52, 84)


@settings(max_examples=60, deadline=None)
@given(expr=celery_expressions())
def test_words_for_any_expression_celery_reads(expr: str) -> None:
    # cron_descriptor cannot read every form (``Sun-5,*/2``): the canonical form is described
    # then. The note about both day fields is there exactly when both are restricted.
    try:
        schedule = Cron(expr, "Asia/Kolkata")
    except ValueError:
        return
    words = describe(schedule)
    fields = expr.split()
    both = "*" not in (fields[2], fields[4])
    assert (" (Asia/Kolkata) — only on days that match both" in words) == both
    assert words.endswith("Unix cron would run on either" if both else " (Asia/Kolkata)")


def test_words_for_forms_cron_descriptor_cannot_read() -> None:
    assert describe(Cron("22 16 * * Sun-5,*/2")) == "At 04:22 PM (UTC)"
    assert describe(Cron("*/15,5 * * * *")) == "At 0, 5, 15, 30, and 45 minutes past the hour (UTC)"
