"""Solar schedules (``jobs.schedule.solar``): one slot per day at the event, the same instant
whoever asks and whenever, as ``celery.schedules.solar`` computes it; no slot on a day without
the event (polar day and night)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from celery.schedules import solar as celery_solar

from jobs.schedule import slots
from jobs.schedule.kinds import SOLAR_EVENTS, Solar, describe

PARIS = (48.85, 2.35)
MIDSUMMER = datetime(2026, 6, 21, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize("event", SOLAR_EVENTS)
def test_each_event_is_where_celery_puts_it(event: str) -> None:
    schedule = Solar(event, *PARIS)
    start = datetime(2026, 3, 10, 0, 0, tzinfo=UTC)
    ours = slots.next_slot(schedule, start)
    theirs = celery_solar(event, *PARIS, nowfun=lambda: start)  # type: ignore[arg-type]
    expected = start + theirs.remaining_estimate(start)
    assert ours is not None and abs(ours - expected) <= timedelta(seconds=1)


def test_every_instant_of_a_day_names_the_same_slot() -> None:
    schedule = Solar("sunset", *PARIS)
    slot = slots.latest_slot(schedule, MIDSUMMER + timedelta(hours=12))
    following = slots.next_slot(schedule, slot)  # type: ignore[arg-type]
    assert slot is not None and following is not None
    assert timedelta(hours=23, minutes=58) < following - slot < timedelta(hours=24, minutes=2)
    step = (following - slot) / 97
    for n in range(97):
        now = slot + step * n
        assert slots.latest_slot(schedule, now) == slot
        assert slots.next_slot(schedule, now) == following
    assert slot.microsecond == 0 and slots.latest_slot(schedule, slot) == slot


def test_a_week_has_seven_slots_a_day_apart() -> None:
    window = slots.slots_in(Solar("sunrise", *PARIS), MIDSUMMER, MIDSUMMER + timedelta(days=7), 50)
    assert len(window.slots) == 7 and window.omitted == 0
    gaps = [b - a for a, b in zip(window.slots, window.slots[1:], strict=False)]
    assert all(
        timedelta(hours=23, minutes=55) < gap < timedelta(hours=24, minutes=5) for gap in gaps
    )


def test_no_sunset_in_the_polar_day() -> None:
    svalbard = Solar("sunset", 78.22, 15.65)
    following = slots.next_slot(svalbard, MIDSUMMER)
    latest = slots.latest_slot(svalbard, MIDSUMMER)
    assert following is not None and latest is not None
    assert following.month == 8 and latest.month == 4  # the sun sets again in late August
    assert slots.next_slot(svalbard, latest) == following


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (("moonrise", 1.0, 2.0), "'moonrise' is not a solar event"),
        (("sunrise", 91.0, 2.0), "latitude 91.0 is not between -90 and 90"),
        (("sunrise", 1.0, -181.0), "longitude -181.0 is not between -180 and 180"),
    ],
)
def test_bad_solar_values_are_named(fields: tuple[str, float, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Solar(*fields)


def test_described_in_words() -> None:
    assert describe(Solar("dusk_civil", 48.85, 2.35)) == "daily at dusk civil (48.85, 2.35)"
