"""Slot maths: deterministic, monotonic, no slot twice, none skipped, and the DST rule.

The cron properties compare ``jobs.schedule.slots`` with a brute-force enumeration that walks every
UTC minute of a window and applies the documented rule directly (no croniter involved)."""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.schedule.kinds import At, Cron, Every
from jobs.schedule.slots import EPOCH, latest_slot, next_slot, previous_slot, slots_in

instants = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
intervals = st.integers(min_value=1, max_value=7 * 86400)


@given(now=instants, seconds=intervals)
def test_interval_slot_is_anchored_and_brackets_now(now: datetime, seconds: int) -> None:
    schedule = Every(seconds)
    latest, following = latest_slot(schedule, now), next_slot(schedule, now)
    assert latest is not None and following is not None
    assert latest <= now < following
    assert following - latest == timedelta(seconds=seconds)
    assert (latest - EPOCH) % timedelta(seconds=seconds) == timedelta(0)


@given(now=instants, seconds=intervals, skew=st.floats(min_value=-0.49, max_value=0.49))
def test_clock_skew_below_half_an_interval_keeps_the_slot(
    now: datetime, seconds: int, skew: float
) -> None:
    # A beat that fires a slot does so at (or just after) the slot instant on its own clock.
    schedule = Every(seconds)
    slot = latest_slot(schedule, now)
    assert slot is not None
    skewed_fire = slot + timedelta(seconds=max(skew, 0) * seconds)
    assert latest_slot(schedule, skewed_fire) == slot


@given(start=instants, seconds=st.integers(min_value=1, max_value=3600))
def test_walking_next_slot_never_repeats_or_skips(start: datetime, seconds: int) -> None:
    schedule = Every(seconds)
    current = latest_slot(schedule, start)
    assert current is not None
    for _ in range(50):
        following = next_slot(schedule, current)
        assert following is not None
        assert following - current == timedelta(seconds=seconds)
        assert latest_slot(schedule, following) == following
        current = following


@given(now=instants, anchor=instants, seconds=intervals)
def test_custom_anchor(now: datetime, anchor: datetime, seconds: int) -> None:
    schedule = Every(seconds, anchor=anchor)
    latest = latest_slot(schedule, now)
    if now < anchor:
        assert latest is None
        assert next_slot(schedule, now) == anchor
    else:
        assert latest is not None
        assert (latest - anchor) % timedelta(seconds=seconds) == timedelta(0)
        assert latest <= now


@settings(max_examples=50)
@given(now=instants)
def test_cron_slots_are_minute_aligned_and_bracket_now(now: datetime) -> None:
    schedule = Cron("*/15 * * * *")
    latest, following = latest_slot(schedule, now), next_slot(schedule, now)
    assert latest is not None and following is not None
    assert latest <= now < following
    assert following - latest == timedelta(minutes=15)
    assert latest.minute % 15 == 0 and latest.second == 0


def test_cron_exact_hit_counts_as_latest() -> None:
    instant = datetime(2026, 5, 4, 2, 30, tzinfo=UTC)
    assert latest_slot(Cron("30 2 * * *"), instant) == instant
    assert next_slot(Cron("30 2 * * *"), instant) == instant + timedelta(days=1)


def test_cron_in_a_zone_is_stored_as_utc() -> None:
    summer = datetime(2026, 7, 1, 12, tzinfo=UTC)
    slot = latest_slot(Cron("30 2 * * *", "Europe/Paris"), summer)
    assert slot == datetime(2026, 7, 1, 0, 30, tzinfo=UTC)  # 02:30 CEST
    assert slot is not None and slot.tzinfo == UTC


def test_one_off_is_due_once() -> None:
    when = datetime(2030, 1, 1, 9, tzinfo=UTC)
    schedule = At(when)
    assert latest_slot(schedule, when - timedelta(seconds=1)) is None
    assert next_slot(schedule, when - timedelta(seconds=1)) == when
    assert latest_slot(schedule, when) == when
    assert next_slot(schedule, when) is None


# --- the DST rule, by example -----------------------------------------------------------------
# Non-existent local time (spring forward): runs at the first instant after the gap.
# Repeated local time (fall back): runs once, at its first occurrence.


def _walk(schedule: Cron, start: datetime, until: datetime) -> list[datetime]:
    found = []
    current = next_slot(schedule, start)
    while current is not None and current <= until:
        found.append(current)
        current = next_slot(schedule, current)
    return found


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("expr", "tz", "day", "expected"),
    [
        # Paris, 2026-03-29: 02:00 CET jumps to 03:00 CEST at 01:00 UTC; 02:30 does not exist.
        ("30 2 * * *", "Europe/Paris", "2026-03-29", ["2026-03-29T01:00"]),
        # Several non-existent times in one gap make one slot, shared with 03:00 itself.
        ("0,15,30,45 2 * * *", "Europe/Paris", "2026-03-29", ["2026-03-29T01:00"]),
        ("0 2,3 * * *", "Europe/Paris", "2026-03-29", ["2026-03-29T01:00"]),
        # Paris, 2026-10-25: 03:00 CEST falls back to 02:00 CET at 01:00 UTC; 02:30 happens
        # twice (00:30 and 01:30 UTC) and runs once, at the first.
        ("30 2 * * *", "Europe/Paris", "2026-10-25", ["2026-10-25T00:30"]),
        # New York, 2026-03-08: 02:00 EST jumps to 03:00 EDT at 07:00 UTC.
        ("30 2 * * *", "America/New_York", "2026-03-08", ["2026-03-08T07:00"]),
        # New York, 2026-11-01: 02:00 EDT falls back to 01:00 EST at 06:00 UTC; 01:30 happens at
        # 05:30 and 06:30 UTC and runs once, at 05:30.
        ("30 1 * * *", "America/New_York", "2026-11-01", ["2026-11-01T05:30"]),
        # Untouched by the change: before and after it, every day at the same wall time.
        ("30 4 * * *", "America/New_York", "2026-11-01", ["2026-11-01T09:30"]),
        ("30 4 * * *", "Europe/Paris", "2026-03-29", ["2026-03-29T02:30"]),
    ],
)
def test_dst_rule(expr: str, tz: str, day: str, expected: list[str]) -> None:
    zone = zoneinfo.ZoneInfo(tz)
    start = datetime.fromisoformat(day).replace(tzinfo=zone).astimezone(UTC)
    end = (datetime.fromisoformat(day) + timedelta(days=1)).replace(tzinfo=zone).astimezone(UTC)
    found = _walk(Cron(expr, tz), start - timedelta(microseconds=1), end - timedelta(seconds=1))
    assert found == [_utc(text) for text in expected]


def test_repeated_hour_every_fifteen_minutes_runs_the_first_pass_only() -> None:
    schedule = Cron("*/15 * * * *", "Europe/Paris")
    found = _walk(schedule, _utc("2026-10-25T00:30"), _utc("2026-10-25T02:15"))
    # 02:45 CEST (00:45 UTC), then the whole 02:xx CET pass is the same wall times: skipped.
    assert found == [_utc(t) for t in ("2026-10-25T00:45", "2026-10-25T02:00", "2026-10-25T02:15")]


def test_latest_slot_inside_the_second_pass_of_a_repeated_hour() -> None:
    schedule = Cron("30 2 * * *", "Europe/Paris")
    # 01:45 UTC is 02:45 CET, the second pass: today's 02:30 already ran at 00:30 UTC.
    assert latest_slot(schedule, _utc("2026-10-25T01:45")) == _utc("2026-10-25T00:30")
    assert next_slot(schedule, _utc("2026-10-25T01:45")) == _utc("2026-10-26T01:30")
    assert latest_slot(schedule, _utc("2026-03-29T01:00")) == _utc("2026-03-29T01:00")
    assert latest_slot(schedule, _utc("2026-03-29T00:59:59")) == _utc("2026-03-28T01:30")


def test_slots_in_lists_the_newest_and_counts_the_rest() -> None:
    window = slots_in(Every(1), _utc("2026-01-01T00:00"), _utc("2026-01-08T00:00"), limit=1000)
    assert len(window.slots) == 1000
    assert window.slots[-1] == _utc("2026-01-08T00:00")
    assert window.omitted == 7 * 86400 - 1000 and window.omitted_count_exact
    assert window.omitted_first == _utc("2026-01-01T00:00:01")
    empty = slots_in(Every(60), _utc("2026-01-01T00:00"), _utc("2026-01-01T00:00:59"), limit=5)
    assert empty.slots == [] and empty.omitted == 0
    cron = slots_in(Cron("*/20 * * * *"), _utc("2026-01-01T00:00"), _utc("2026-01-01T02:00"), 3)
    assert cron.slots == [
        _utc(t) for t in ("2026-01-01T01:20", "2026-01-01T01:40", "2026-01-01T02:00")
    ]
    assert cron.omitted >= 1 and cron.omitted_first == _utc("2026-01-01T00:20")


# --- the DST rule, against a brute-force enumeration ------------------------------------------

ZONES = ["Europe/Paris", "America/New_York", "Australia/Lord_Howe", "UTC"]  # Lord Howe: 30 min


@cache
def _transitions(tz: str) -> list[datetime]:
    """Instants in 2025-2027 at which ``tz`` changes its offset (found by scanning)."""
    zone = zoneinfo.ZoneInfo(tz)
    found, current = [], datetime(2025, 1, 1, tzinfo=UTC)
    step = timedelta(minutes=30)
    while current < datetime(2028, 1, 1, tzinfo=UTC):
        if current.astimezone(zone).utcoffset() != (current + step).astimezone(zone).utcoffset():
            found.append(current + step)
        current += step
    return found or [datetime(2026, 6, 1, tzinfo=UTC)]


@dataclass(frozen=True)
class CronSpec:
    """A cron expression together with the sets it matches, so the oracle needs no parser."""

    minutes: frozenset[int]
    hours: frozenset[int]
    weekdays: frozenset[int]  # cron numbering: 0 = Sunday
    minute_field: str
    hour_field: str
    weekday_field: str

    @property
    def expr(self) -> str:
        return f"{self.minute_field} {self.hour_field} * * {self.weekday_field}"

    def matches(self, wall: datetime) -> bool:
        return (
            wall.minute in self.minutes
            and wall.hour in self.hours
            and (wall.weekday() + 1) % 7 in self.weekdays
        )


def _field(values: frozenset[int], everything: range) -> str:
    return "*" if values == frozenset(everything) else ",".join(map(str, sorted(values)))


@st.composite
def cron_specs(draw: st.DrawFn) -> CronSpec:
    step = draw(st.sampled_from([None, 1, 5, 15, 20, 30]))
    if step is None:
        minutes = frozenset(draw(st.sets(st.integers(0, 59), min_size=1, max_size=3)))
        minute_field = _field(minutes, range(60))
    else:
        minutes = frozenset(range(0, 60, step))
        minute_field = f"*/{step}"
    # Hours near the usual change times, so most examples cross a gap or an overlap.
    hours = frozenset(
        draw(st.one_of(st.just(frozenset(range(24))), st.sets(st.integers(0, 4), min_size=1)))
    )
    weekdays = frozenset(
        draw(st.one_of(st.just(frozenset(range(7))), st.sets(st.integers(0, 6), min_size=1)))
    )
    return CronSpec(
        minutes,
        hours,
        weekdays,
        minute_field,
        _field(hours, range(24)),
        _field(weekdays, range(7)),
    )


def _brute_force(spec: CronSpec, tz: str, start: datetime, end: datetime) -> list[datetime]:
    """Every UTC minute in [start, end) that is a slot by the rule, found one minute at a time."""
    zone = zoneinfo.ZoneInfo(tz)
    minute = timedelta(minutes=1)
    found = []
    current = start
    previous_wall = (current - minute).astimezone(zone).replace(tzinfo=None)
    while current < end:
        local = current.astimezone(zone)
        wall = local.replace(tzinfo=None)
        due = local.fold == 0 and spec.matches(wall)  # a repeated time: first pass only
        skipped = previous_wall + minute
        while skipped < wall:  # wall times swallowed by a gap run at its end: now
            due = due or spec.matches(skipped)
            skipped += minute
        if due:
            found.append(current)
        previous_wall = wall
        current += minute
    return found


WINDOW = timedelta(days=2)


@settings(max_examples=60, deadline=None)
@given(
    spec=cron_specs(),
    tz=st.sampled_from(ZONES),
    which=st.integers(0, 5),
    shift_minutes=st.integers(-24 * 60, 24 * 60),
)
def test_cron_slots_match_a_minute_by_minute_enumeration(
    spec: CronSpec, tz: str, which: int, shift_minutes: int
) -> None:
    transitions = _transitions(tz)
    center = transitions[which % len(transitions)] + timedelta(minutes=shift_minutes)
    start = center.replace(second=0, microsecond=0) - WINDOW / 2
    expected = _brute_force(spec, tz, start, start + WINDOW)
    schedule = Cron(spec.expr, tz)
    found = _walk(
        schedule, start - timedelta(microseconds=1), start + WINDOW - timedelta(seconds=1)
    )
    assert found == expected  # none skipped, none extra
    assert all(a < b for a, b in pairwise(found))  # monotonic, none twice
    # latest/next/previous agree with the walk (on a sample: a minutely cron has 2880 slots).
    pairs = list(pairwise(found))
    zone = zoneinfo.ZoneInfo(tz)
    across_a_change = [
        (a, b) for a, b in pairs if a.astimezone(zone).utcoffset() != b.astimezone(zone).utcoffset()
    ]
    pairs = pairs[:: max(1, len(pairs) // 50)] + across_a_change
    for slot in found[:: max(1, len(found) // 50)]:
        assert latest_slot(schedule, slot) == slot
        assert next_slot(schedule, slot - timedelta(microseconds=1)) == slot
    # Between two consecutive slots, latest_slot answers the earlier one.
    for earlier, later in pairs:
        middle = earlier + (later - earlier) / 2
        assert latest_slot(schedule, middle) == earlier
        assert next_slot(schedule, middle) == later
        assert previous_slot(schedule, later) == earlier


@settings(max_examples=60, deadline=None)
@given(spec=cron_specs(), tz=st.sampled_from(ZONES), which=st.integers(0, 5), data=st.data())
def test_cron_latest_and_next_bracket_any_instant(
    spec: CronSpec, tz: str, which: int, data: st.DataObject
) -> None:
    transitions = _transitions(tz)
    center = transitions[which % len(transitions)]
    offset = data.draw(st.floats(min_value=-86400.0, max_value=86400.0))
    now = center + timedelta(seconds=offset)
    schedule = Cron(spec.expr, tz)
    latest, following = latest_slot(schedule, now), next_slot(schedule, now)
    assert latest is not None and following is not None
    assert latest <= now < following
    assert next_slot(schedule, latest) == following  # nothing in between
