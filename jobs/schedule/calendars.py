"""Calendars: which of a job's slots the beats skip (weekends for a business-days job, the public
holidays of its holiday calendar) or do not schedule at all (before its ``active_from``, after its
``active_until``), judged in the job's time zone. Pure, no I/O; blackout windows are rows, checked
by the statement that inserts the slot (``jobs.guard.run_records.blackout_of_pg``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime
from functools import lru_cache
from typing import Protocol
from zoneinfo import ZoneInfo

import holidays
from django.conf import settings

from jobs.schedule.kinds import Schedule

# ISO 3166-1 alpha-2 country, optionally an ISO 3166-2 subdivision: US, DE-BY, GB-ENG.
_CALENDAR_CODE = re.compile(r"^([A-Z]{2})(?:-([A-Z0-9]{1,4}))?\Z")


def parse_holiday_calendar(code: str) -> tuple[str, str | None]:
    """``(country, subdivision)`` of a holiday calendar code that the ``holidays`` library
    knows; ``ValueError`` saying why not."""
    match = _CALENDAR_CODE.match(code)
    if match is None:
        raise ValueError(
            f"{code[:40]!r} is not a holiday calendar: a country code, optionally with a "
            "region, e.g. US, DE-BY, GB-ENG"
        )
    country, subdivision = match.groups()
    try:
        holidays.country_holidays(country, subdiv=subdivision, years=[])
    except NotImplementedError as exc:
        raise ValueError(f"{code!r} is no calendar of the holidays library: {exc}") from None
    return country, subdivision


@lru_cache(maxsize=512)
def _holidays_of(country: str, subdivision: str | None, year: int) -> dict[date, str]:
    calendar = holidays.country_holidays(country, subdiv=subdivision, years=[])
    named = holidays.country_holidays(
        country, subdiv=subdivision, years=year, language=_names_language(calendar)
    )
    return dict(named.items())


def _names_language(calendar: holidays.HolidayBase) -> str | None:
    """The language of the holiday names in skip reasons: American English where the library
    has it (else English, else the calendar's own), whatever the process's locale. Left to the
    library, the name follows ``LANGUAGE``/``LC_*``/``LANG``, which Python reads differently
    across versions: 3.11 takes the common ``C.UTF-8`` for ``en_US``, 3.12 for no language."""
    for language in ("en_US", "en", calendar.default_language):
        if language in calendar.supported_languages:
            return language
    return None


def time_zone_of(schedule: Schedule) -> str:
    """The zone a job's days are judged in: its crontab's, else the project's ``TIME_ZONE``."""
    return schedule.time_zone or str(settings.TIME_ZONE)


def skip_reason(
    slot: datetime, *, zone: str, business_days_only: bool, holiday_calendar: str
) -> str:
    """Why the beats record ``slot`` skipped ("" when they do not): a weekend for a
    business-days job, a public holiday of its holiday calendar, on the slot's local date."""
    day = slot.astimezone(ZoneInfo(zone)).date()
    if business_days_only and day.weekday() >= 5:
        return f"weekend: {day:%A} {day.isoformat()} ({zone}) is not a business day"
    if holiday_calendar:
        country, subdivision = parse_holiday_calendar(holiday_calendar)
        name = _holidays_of(country, subdivision, day.year).get(day)
        if name is not None:
            return f"holiday: {name} on {day.isoformat()} ({holiday_calendar})"
    return ""


class Calendar(Protocol):
    """What of a job its calendar reads (a ``Job`` has it all)."""

    active_from: datetime | None
    active_until: datetime | None
    expires_at: datetime | None
    business_days_only: bool
    holiday_calendar: str


@dataclass(frozen=True)
class Verdict:
    """What the beats make of one slot: nothing at all (``scheduled`` False, outside the job's
    active period or after it expired), a run skipped (``reason``), or a run (``reason`` "")."""

    scheduled: bool
    reason: str


def verdict(slot: datetime, job: Calendar, *, zone: str) -> Verdict:
    """The beats' decision on ``slot`` of ``job`` short of blackout windows (rows, which the
    insert reads: ``jobs.guard.run_records.skip_reason_pg``); ``ValueError`` for a holiday
    calendar that cannot be read. The beat (``jobs.beat.scheduler``), backfills and the preview
    of slots to come (``jobs.beat.slot_fates``) all ask it."""
    if not is_active(slot, job.active_from, job.active_until):
        end = "active_from" if job.active_from and slot < job.active_from else "active_until"
        bound = job.active_from if end == "active_from" else job.active_until
        assert bound is not None
        side = "before" if end == "active_from" else "after"
        return Verdict(False, f"inactive: {side} the job's {end} {bound.isoformat()}")
    if job.expires_at is not None and slot >= job.expires_at:
        return Verdict(False, f"expired: the job expires at {job.expires_at.isoformat()}")
    reason = skip_reason(
        slot,
        zone=zone,
        business_days_only=job.business_days_only,
        holiday_calendar=job.holiday_calendar,
    )
    return Verdict(True, reason)


def is_active(slot: datetime, active_from: datetime | None, active_until: datetime | None) -> bool:
    """Whether ``slot`` lies in the job's active period (either end open when unset)."""
    return (active_from is None or slot >= active_from) and (
        active_until is None or slot <= active_until
    )


def active_span(
    since: datetime, until: datetime, active_from: datetime | None, active_until: datetime | None
) -> tuple[datetime, datetime]:
    """The part of ``[since, until]`` inside the job's active period (empty when the first end
    comes after the second): the slots ``is_active`` accepts there, found without walking the
    others."""
    return (
        max(since, active_from) if active_from else since,
        min(until, active_until) if active_until else until,
    )
