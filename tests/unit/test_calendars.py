"""Calendar decisions (jobs.schedule.calendars): weekends and public holidays judged on the slot's
local date in the job's time zone, across DST changes; the active period; bad calendar codes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from jobs.schedule import calendars
from jobs.schedule.kinds import Cron, Every


def reason(slot: datetime, zone: str = "UTC", *, days: bool = False, code: str = "") -> str:
    return calendars.skip_reason(slot, zone=zone, business_days_only=days, holiday_calendar=code)


def test_a_weekend_is_skipped_only_for_a_business_days_job() -> None:
    saturday = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
    assert reason(saturday, days=True) == "weekend: Saturday 2026-11-28 (UTC) is not a business day"
    assert reason(saturday) == ""
    assert reason(datetime(2026, 11, 27, 12, 0, tzinfo=UTC), days=True) == ""  # a Friday


@pytest.mark.parametrize(
    ("slot", "zone", "skipped"),
    [
        # Berlin springs forward on Sunday 2026-03-29: 23:30 UTC that day is already Monday
        # 01:30 CEST (a business day); 21:30 UTC is still Sunday 23:30 CEST.
        (datetime(2026, 3, 29, 23, 30, tzinfo=UTC), "Europe/Berlin", False),
        (datetime(2026, 3, 29, 21, 30, tzinfo=UTC), "Europe/Berlin", True),
        # It falls back on Sunday 2026-10-25: 22:30 UTC is Sunday 23:30 CET, 23:30 UTC Monday.
        (datetime(2026, 10, 25, 22, 30, tzinfo=UTC), "Europe/Berlin", True),
        (datetime(2026, 10, 25, 23, 30, tzinfo=UTC), "Europe/Berlin", False),
        # New York's spring-forward Sunday 2026-03-08: 04:30 UTC is Saturday 23:30 EST (a
        # weekend), 13:00 UTC Monday is 09:00 EDT (Monday).
        (datetime(2026, 3, 9, 13, 0, tzinfo=UTC), "America/New_York", False),
        (datetime(2026, 3, 8, 4, 30, tzinfo=UTC), "America/New_York", True),
    ],
)
def test_the_day_is_the_slot_s_local_day_across_dst_changes(
    slot: datetime, zone: str, skipped: bool
) -> None:
    assert bool(reason(slot, zone, days=True)) is skipped


def test_public_holidays_of_a_country_and_of_a_region() -> None:
    christmas = datetime(2026, 12, 25, 15, 0, tzinfo=UTC)
    assert reason(christmas, code="US") == "holiday: Christmas Day on 2026-12-25 (US)"
    epiphany = datetime(2026, 1, 6, 9, 0, tzinfo=UTC)
    assert reason(epiphany, "Europe/Berlin", code="DE-BY").startswith("holiday: Epiphany")
    assert reason(epiphany, "Europe/Berlin", code="DE-BE") == ""  # not a holiday in Berlin
    # 2026-12-25 04:00 UTC is still Christmas Eve in Los Angeles: not a holiday there yet.
    assert reason(datetime(2026, 12, 25, 4, 0, tzinfo=UTC), "America/Los_Angeles", code="US") == ""


@pytest.mark.parametrize("locale", ["de_DE.UTF-8", "C.UTF-8", "fr"])
def test_holiday_names_are_english_whatever_the_locale(
    monkeypatch: pytest.MonkeyPatch, locale: str
) -> None:
    # Python 3.11 reads C.UTF-8 as en_US, 3.12 as no language: the name is ours to choose.
    monkeypatch.setenv("LANGUAGE", locale)
    calendars._holidays_of.cache_clear()
    try:
        epiphany = datetime(2026, 1, 6, 9, 0, tzinfo=UTC)
        assert reason(epiphany, "Europe/Berlin", code="DE-BY") == (
            "holiday: Epiphany on 2026-01-06 (DE-BY)"
        )
    finally:
        calendars._holidays_of.cache_clear()


@pytest.mark.parametrize("code", ["XX", "us", "DE-ZZ", "DE-", "D", "US-CA-SF", "", "ÜS"])
def test_a_code_that_is_no_holiday_calendar_is_refused(code: str) -> None:
    if code == "":
        assert reason(datetime(2026, 12, 25, tzinfo=UTC), code=code) == ""  # none: no holidays
        return
    with pytest.raises(ValueError, match="holiday"):
        calendars.parse_holiday_calendar(code)


def test_a_job_s_zone_is_its_crontab_s_else_the_project_s() -> None:
    assert calendars.time_zone_of(Cron(expr="0 9 * * *", tz="Asia/Tokyo")) == "Asia/Tokyo"
    assert calendars.time_zone_of(Every(60)) == "UTC"


def test_the_active_period_includes_both_ends_and_open_ends() -> None:
    start, end = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 2, 1, tzinfo=UTC)
    assert calendars.is_active(start, start, end) and calendars.is_active(end, start, end)
    assert not calendars.is_active(datetime(2025, 12, 31, tzinfo=UTC), start, end)
    assert not calendars.is_active(datetime(2026, 2, 1, 0, 0, 1, tzinfo=UTC), start, end)
    assert calendars.is_active(start, None, None)


@dataclass
class _Calendar:
    """What of a job ``calendars.verdict`` reads."""

    active_from: datetime | None = None
    active_until: datetime | None = None
    expires_at: datetime | None = None
    business_days_only: bool = False
    holiday_calendar: str = ""


def test_the_verdict_says_whether_a_slot_gets_a_run_and_why_not() -> None:
    saturday = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
    later = datetime(2026, 12, 1, tzinfo=UTC)
    earlier = datetime(2026, 11, 1, tzinfo=UTC)
    assert calendars.verdict(saturday, _Calendar(), zone="UTC") == calendars.Verdict(True, "")
    assert calendars.verdict(saturday, _Calendar(business_days_only=True), zone="UTC") == (
        calendars.Verdict(True, "weekend: Saturday 2026-11-28 (UTC) is not a business day")
    )
    assert calendars.verdict(saturday, _Calendar(active_from=later), zone="UTC") == (
        calendars.Verdict(False, "inactive: before the job's active_from 2026-12-01T00:00:00+00:00")
    )
    assert calendars.verdict(saturday, _Calendar(active_until=earlier), zone="UTC") == (
        calendars.Verdict(False, "inactive: after the job's active_until 2026-11-01T00:00:00+00:00")
    )
    assert calendars.verdict(saturday, _Calendar(expires_at=saturday), zone="UTC") == (
        calendars.Verdict(False, "expired: the job expires at 2026-11-28T12:00:00+00:00")
    )
    # Outside the active period, a calendar that cannot be read is not even asked (as the beat).
    broken = _Calendar(active_from=later, holiday_calendar="XX")
    assert not calendars.verdict(saturday, broken, zone="UTC").scheduled
    with pytest.raises(ValueError, match="XX"):
        calendars.verdict(saturday, _Calendar(holiday_calendar="XX"), zone="UTC")
