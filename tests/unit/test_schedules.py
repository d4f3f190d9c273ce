from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobs.schedules import (
    At,
    Cron,
    Every,
    describe,
    format_duration,
    parse_duration,
    parse_instant,
    parse_interval,
    validate_cron,
    validate_timezone,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10s", 10), ("5m", 300), ("1h30m", 5400), ("2d", 172800), ("90", 90), ("1w", 604800)],
)
def test_parse_duration_accepts_common_forms(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "ten seconds", "10x", "5m garbage", "m5"])
def test_parse_duration_rejects_garbage_with_a_hint(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["-5s", "0", "0s", "-1"])
def test_interval_must_be_positive(text: str) -> None:
    with pytest.raises(ValueError, match="positive"):
        parse_interval(text)


def test_interval_must_be_whole_seconds() -> None:
    with pytest.raises(ValueError, match="whole number"):
        parse_interval("1500ms")


def test_every_rejects_zero_directly() -> None:
    with pytest.raises(ValueError):
        Every(seconds=0)


def test_cron_needs_five_valid_fields() -> None:
    assert validate_cron(" 30  2 * * * ") == "30 2 * * *"
    with pytest.raises(ValueError, match="five fields"):
        validate_cron("* * * *")
    with pytest.raises(ValueError, match="not a valid"):
        validate_cron("61 * * * *")


def test_cron_validates_its_time_zone() -> None:
    assert Cron("0 9 * * 1-5", "Europe/Paris").tz == "Europe/Paris"
    with pytest.raises(ValueError, match="time zone"):
        Cron("0 9 * * *", "Mars/Olympus")
    with pytest.raises(ValueError, match="time zone"):
        validate_timezone("../etc/passwd")


def test_parse_instant_reads_naive_as_utc_and_keeps_offsets() -> None:
    assert parse_instant("2030-01-01T09:00:00").when == datetime(2030, 1, 1, 9, tzinfo=UTC)
    assert parse_instant("2030-01-01T09:00:00Z").when == datetime(2030, 1, 1, 9, tzinfo=UTC)
    with pytest.raises(ValueError, match="ISO 8601"):
        parse_instant("tomorrow")


def test_at_requires_an_aware_time() -> None:
    with pytest.raises(ValueError, match="time zone"):
        At(datetime(2030, 1, 1))


def test_describe_in_words() -> None:
    assert describe(Every(10)) == "every 10 seconds"
    assert describe(Every(60)) == "every minute"
    assert describe(Every(7200)) == "every 2 hours"
    assert describe(Cron("30 2 * * *", "Europe/Paris")) == "At 02:30 AM (Europe/Paris)"
    assert describe(None) == "continuous"
    assert describe(At(datetime(2030, 1, 1, tzinfo=UTC))).startswith("once at 2030-01-01")


def test_format_duration_round_trips() -> None:
    for seconds in (1, 59, 60, 90, 3600, 86400, 604800):
        assert parse_duration(format_duration(seconds)).total_seconds() == seconds


@pytest.mark.parametrize("text", ["99999999999w", "999999999999", 1e20])
def test_absurd_durations_are_a_value_error_not_an_overflow(text: str | float) -> None:
    with pytest.raises(ValueError, match="too long"):
        parse_duration(text)
