from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobs.schedule.kinds import (
    At,
    Cron,
    Every,
    canonical_cron,
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


def test_describe_says_both_day_fields_must_match() -> None:
    first_monday = describe(Cron("0 9 1-7 * 1", "Europe/Paris"))
    assert first_monday == (
        "At 09:00 AM, between day 1 and 7 of the month, only on Monday (Europe/Paris)"
        " — only on days that match both the day of month (between day 1 and 7 of the month)"
        " and the day of week (Monday), as in Celery's crontab; Unix cron would run on either"
    )
    friday_13 = describe(Cron("0 0 13 * fri"))
    assert "match both the day of month (on day 13 of the month) and the day of week (Friday)" in (
        friday_13
    )
    # One day field unrestricted: nothing to combine, no note.
    assert describe(Cron("0 9 * * 1-5", "Europe/Paris")) == (
        "At 09:00 AM, Monday through Friday (Europe/Paris)"
    )
    assert describe(Cron("0 9 1-7 * *")) == "At 09:00 AM, between day 1 and 7 of the month (UTC)"


def test_describe_words_are_celerys_reading() -> None:
    # Described by the canonical form where cron_descriptor would read the typed text otherwise.
    assert describe(Cron("*/100 * * * *")) == "Every hour (UTC)"
    assert describe(Cron("0 0 * * sunday")) == "At 12:00 AM, only on Sunday (UTC)"
    assert describe(Cron("0 0 * * 1-5-7")) == "At 12:00 AM, Monday through Friday (UTC)"
    # Typed forms that read alike stay as typed.
    assert describe(Cron("*/15 * * * *")) == "Every 15 minutes (UTC)"
    assert describe(Cron("0 0 * * fri-mon")) == "At 12:00 AM, Friday through Monday (UTC)"


def test_format_duration_round_trips() -> None:
    for seconds in (1, 59, 60, 90, 3600, 86400, 604800):
        assert parse_duration(format_duration(seconds)).total_seconds() == seconds


@pytest.mark.parametrize("text", ["99999999999w", "999999999999", 1e20])
def test_absurd_durations_are_a_value_error_not_an_overflow(text: str | float) -> None:
    with pytest.raises(ValueError, match="too long"):
        parse_duration(text)


# --- validation that knows the calendar, and bounds checked before any library ------------


# Day of month and day of week must both match, as in Celery's crontab: 31 February on a Monday
# never comes (Unix cron, and croniter's default, would run it every Monday).
@pytest.mark.parametrize("expr", ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4 *", "0 0 31 2 mon"])
def test_a_cron_that_never_fires_is_refused(expr: str) -> None:
    with pytest.raises(ValueError, match=r"never fires: no date in the next 5 years"):
        validate_cron(expr)
    with pytest.raises(ValueError, match="never fires"):
        Cron(expr, "Pacific/Kiritimati")


def test_a_day_that_never_falls_on_the_weekday_in_five_years_is_refused() -> None:
    # 29 February is a Monday in 2044, then 2072: refused, saying why.
    with pytest.raises(ValueError, match="Both must match, as in Celery's crontab"):
        validate_cron("0 0 29 2 1")


@pytest.mark.parametrize(
    "expr", ["0 0 29 2 *", "0 0 31 * *", "0 0 13 * 5", "0 9 1-7 * mon", "0 0 1-7 * 1"]
)
def test_a_rare_cron_that_does_fire_is_accepted(expr: str) -> None:
    assert Cron(expr, "Europe/Paris").expr == expr


@pytest.mark.parametrize(
    ("expr", "field"),
    [
        ("0 0 L 2 *", "the day of month field 'L'"),
        ("0 0 15W * *", "the day of month field '15W'"),
        ("0 0 ? * *", "the day of month field '?'"),
        ("0 0 * 2 1#5", "the day of week field '1#5'"),
        ("0 0 * * L5", "the day of week field 'L5'"),  # the last Friday
        ("0 0 * * 7", "the day of week field '7'"),
        ("0 0 * * 1-7", "the day of week field '1-7'"),
        ("5/15 * * * *", "the minute field '5/15'"),
    ],
)
def test_croniter_only_syntax_is_refused_naming_the_field(expr: str, field: str) -> None:
    # Celery's crontab does not read these (stock beat raises on such a row): no second meaning.
    with pytest.raises(ValueError, match="is not a valid cron expression") as refused:
        Cron(expr, "Europe/Paris")
    message = str(refused.value)
    assert f"{field} is not valid in Celery's crontab" in message
    assert "croniter reads it, Celery's crontab does not" in message


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("61 * * * *", "the minute field '61' is not valid in Celery's crontab: 61 is above 59"),
        ("0 0 0 * *", "the day of month field '0' is not valid in Celery's crontab: 0 is below 1"),
        ("0 0 * * someday", "'someday' is not a number or a name"),
        ("*/0 * * * *", "the minute field '*/0' is not valid in Celery's crontab"),
        ("0 0 * 1, *", "the month field '1,' is not valid in Celery's crontab: empty part"),
    ],
)
def test_a_field_celery_cannot_read_is_named(expr: str, message: str) -> None:
    with pytest.raises(ValueError, match="is not a valid cron expression") as refused:
        validate_cron(expr)
    assert message in str(refused.value)
    assert "croniter reads it" not in str(refused.value)


@pytest.mark.parametrize(
    ("typed", "canonical"),
    [
        ("30 2 * * *", "30 2 * * *"),
        ("*/15 * * * *", "*/15 * * * *"),
        ("1-30/5 * * * *", "1,6,11,16,21,26 * * * *"),
        ("0 22-2 * * *", "0 0-2,22-23 * * *"),  # a range that wraps midnight
        ("0 9 * * fri-mon", "0 9 * * 0-1,5-6"),  # and one that wraps the week
        ("0 9 * * MON-Fri", "0 9 * * 1-5"),
        ("0 9 1-7 jan,jul mon", "0 9 1-7 */6 1"),  # croniter reads */6 months as 1,7
        ("0 9 1-31 * 0-6", "0 9 * * *"),
        ("0 9 */2 * sunday", "0 9 */2 * 0"),
        ("*/100 * * * *", "0 * * * *"),  # Celery: [0, 1, ..., 59][::100]
        ("0 0 * * 1-5-7", "0 0 * * 1-5"),  # Celery's parser reads the first range only
    ],
)
def test_canonical_form_is_what_celery_reads(typed: str, canonical: str) -> None:
    assert canonical_cron(typed) == canonical
    assert Cron(typed, "UTC").expr == typed  # what was typed is what is stored


def test_a_long_cron_is_refused_before_croniter_reads_it() -> None:
    with pytest.raises(ValueError, match="too long: at most 200 characters"):
        validate_cron("1," * 150 + "0 * * * *")
    with pytest.raises(ValueError, match="the hour field is too long: at most 96"):
        validate_cron("0 " + ",".join(["1"] * 60) + " * * *")


def test_the_field_limits_are_the_beat_columns() -> None:
    from django_celery_beat.models import CrontabSchedule

    from jobs.schedule.kinds import CRON_FIELD_MAX_LENGTHS, MAX_TIMEZONE_LENGTH

    columns = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
    widths = tuple(CrontabSchedule._meta.get_field(name).max_length for name in columns)
    assert widths == CRON_FIELD_MAX_LENGTHS
    assert CrontabSchedule._meta.get_field("timezone").max_length == MAX_TIMEZONE_LENGTH


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("America", "not a known time zone"),  # a folder of the zone database
        ("Etc", "not a known time zone"),
        ("Europe/Paris\x00", "not a known time zone"),
        ("../../etc/passwd", "not a known time zone"),
        ("Europe/", "not a known time zone"),
        ("", "not a known time zone"),
        ("Europe/Paris Summer", "not a known time zone"),
        ("A" * 5000, "too long: at most 63 characters"),
    ],
)
def test_a_time_zone_is_checked_before_zoneinfo_opens_anything(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_timezone(name)
    with pytest.raises(ValueError, match=message):
        Cron("0 9 * * *", name)


@pytest.mark.parametrize("text", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"])
def test_an_instant_without_a_utc_equivalent_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="out of range in UTC"):
        parse_instant(text)
