"""Slot maths: deterministic, monotonic, no slot twice, none skipped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.schedules import At, Cron, Every
from jobs.slots import EPOCH, latest_slot, next_slot

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
