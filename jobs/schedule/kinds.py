"""Schedule values and the parsing/validation of what people type for them.

A schedule is a small frozen value: ``Every`` (an anchored interval), ``Cron`` (a five-field cron
expression in a time zone), ``At`` (one instant) or ``Solar`` (a daily solar event at a place).
Parsing errors are ``ValueError`` with a message meant for a human; the edges attach it to the
field that was typed.
"""

from __future__ import annotations

import re
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import cache, lru_cache

from cron_descriptor import get_description
from croniter import CroniterBadDateError, CroniterError, croniter

_DURATION_PART = re.compile(r"(\d+)\s*(ms|s|m|h|d|w)", re.IGNORECASE)
# django-celery-beat stores intervals in a 32-bit integer; ten years is plenty for a schedule.
MAX_DURATION_SECONDS = 10 * 365 * 86400
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

# What people type is bounded before any parser sees it. A cron expression: its whole length
# (croniter's work grows with it), and each field's, by the django-celery-beat column that stores
# it (CrontabSchedule's max_length), so a long field is a message here, not a database error.
MAX_CRON_LENGTH = 200
CRON_FIELDS = ("minute", "hour", "day of month", "month", "day of week")
CRON_FIELD_MAX_LENGTHS = (240, 96, 124, 64, 64)
# A cron that matches no date (30 February) would stop the beat that asks for its next slot, so
# it is refused: it must fire within this many years. (A five-field cron that fires at all
# fires every year, or every leap year for 29 February.)
CRON_HORIZON_YEARS = 5
# IANA names: letters, digits, "_", "+", "-", in "/"-separated parts, the longest 32 characters
# (63: the CrontabSchedule column). No dot, so no "..", and no NUL reaches zoneinfo or the database.
MAX_TIMEZONE_LENGTH = 63
_TIMEZONE_NAME = re.compile(r"[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*\Z")


@dataclass(frozen=True)
class Every:
    """Every ``seconds``, on slots anchored at ``anchor`` (the Unix epoch when unset)."""

    seconds: int
    anchor: datetime | None = None

    def __post_init__(self) -> None:
        if self.seconds < 1:
            raise ValueError("the interval must be at least 1 second")


@dataclass(frozen=True)
class Cron:
    """A five-field cron expression evaluated in the IANA time zone ``tz``."""

    expr: str
    tz: str = "UTC"

    def __post_init__(self) -> None:
        validate_timezone(self.tz)
        object.__setattr__(self, "expr", validate_cron(self.expr, self.tz))

    @property
    def fields(self) -> list[str]:
        return self.expr.split()


@dataclass(frozen=True)
class At:
    """Once, at ``when`` (timezone-aware)."""

    when: datetime

    def __post_init__(self) -> None:
        if self.when.tzinfo is None:
            raise ValueError("the time must include a time zone offset, e.g. 2030-01-01T09:00Z")
        try:
            # Stored and compared in UTC: 0001-01-01T00:00+14:00 has no UTC instant.
            self.when.astimezone(UTC)
        except OverflowError:
            raise ValueError(
                f"{self.when.isoformat()} is out of range in UTC: give a time between the "
                "years 1 and 9999"
            ) from None


# The events of django-celery-beat's SolarSchedule (celery.schedules.solar).
SOLAR_EVENTS = (
    "dawn_astronomical", "dawn_nautical", "dawn_civil", "sunrise", "solar_noon", "sunset",
    "dusk_civil", "dusk_nautical", "dusk_astronomical",
)  # fmt: skip


@dataclass(frozen=True)
class Solar:
    """Once a day at a solar ``event`` (sunrise, sunset, ...) seen from ``latitude`` /
    ``longitude``: django-celery-beat's SolarSchedule, carried over by adoption."""

    event: str
    latitude: float
    longitude: float

    def __post_init__(self) -> None:
        if self.event not in SOLAR_EVENTS:
            raise ValueError(
                f"{self.event!r} is not a solar event: one of {', '.join(SOLAR_EVENTS)}"
            )
        if not -90 <= self.latitude <= 90:
            raise ValueError(f"latitude {self.latitude} is not between -90 and 90")
        if not -180 <= self.longitude <= 180:
            raise ValueError(f"longitude {self.longitude} is not between -180 and 180")


Schedule = Every | Cron | At | Solar


@dataclass(frozen=True)
class Triggered:
    """No slots of its own: the job runs when triggered (its upstreams' successes, run now, the
    API). Its kind is ``triggered``; it has no beat entry."""


# What a job is given when it is defined: a schedule, triggered only, or None (continuous).
Definition = Schedule | Triggered


def parse_duration(text: str | int | float | timedelta) -> timedelta:
    """``"90s"``, ``"5m"``, ``"1h30m"``, ``"2d"`` or a plain number of seconds."""
    if isinstance(text, timedelta):
        return text
    if isinstance(text, int | float):
        return _bounded(float(text), text)
    raw = text.strip()
    if re.fullmatch(r"-?\d+(\.\d+)?", raw):
        return _bounded(float(raw), text)
    if raw.startswith("-"):
        # Parsed so that the caller can say "must be positive" rather than "not a duration".
        return -parse_duration(raw[1:])
    total = 0.0
    position = 0
    for match in _DURATION_PART.finditer(raw):
        if raw[position : match.start()].strip():
            break
        amount, unit = int(match.group(1)), match.group(2).lower()
        total += amount / 1000 if unit == "ms" else amount * _UNIT_SECONDS[unit]
        position = match.end()
    if position == 0 or raw[position:].strip():
        raise ValueError(f"{text!r} is not a duration: use e.g. 30s, 5m, 1h30m or 2d")
    if total > MAX_DURATION_SECONDS:
        raise ValueError(f"{text!r} is too long: at most {MAX_DURATION_SECONDS // 86400} days")
    return timedelta(seconds=total)


def _bounded(seconds: float, text: object) -> timedelta:
    if abs(seconds) > MAX_DURATION_SECONDS:
        raise ValueError(f"{text!r} is too long: at most {MAX_DURATION_SECONDS // 86400} days")
    return timedelta(seconds=seconds)


def parse_interval(text: str | int | float | timedelta) -> Every:
    """A positive whole number of seconds, e.g. ``"10s"``."""
    delta = parse_duration(text)
    seconds = delta.total_seconds()
    if seconds <= 0:
        raise ValueError(f"{text!r}: the interval must be positive")
    if seconds != int(seconds):
        raise ValueError(f"{text!r}: the interval must be a whole number of seconds")
    return Every(seconds=int(seconds))


def validate_cron(expr: str, tz: str = "UTC") -> str:
    """The expression with its fields one space apart, if it is five valid cron fields that
    fire within ``CRON_HORIZON_YEARS`` in the time zone ``tz`` (a valid one)."""
    if len(expr) > MAX_CRON_LENGTH:
        raise ValueError(f"the cron expression is too long: at most {MAX_CRON_LENGTH} characters")
    fields = expr.split()
    if len(fields) != 5:
        raise ValueError(
            f"{expr!r} is not a cron expression: give five fields "
            "(minute hour day-of-month month day-of-week), e.g. '30 2 * * *'"
        )
    for name, text, limit in zip(CRON_FIELDS, fields, CRON_FIELD_MAX_LENGTHS, strict=True):
        if len(text) > limit:
            raise ValueError(f"the {name} field is too long: at most {limit} characters")
    normalized = " ".join(fields)
    _check_fires(normalized, tz, datetime.now(UTC).date())
    return normalized


@lru_cache(maxsize=4096)
def _check_fires(expr: str, tz: str, today: date) -> None:
    """Cached per day: a beat that loads thousands of jobs asks once per distinct schedule,
    and an answer about the next years does not change within a day."""
    try:
        croniter.expand(expr)  # the syntax, as croniter.is_valid checks it
        if not _day_may_not_exist(expr):
            return
        # Matching is on wall-clock times (see jobs.schedule.slots), so start from the zone's wall
        # clock.
        wall = datetime.combine(today, time(), UTC).astimezone(validate_timezone(tz))
        matches = croniter(
            expr, wall.replace(tzinfo=UTC), max_years_between_matches=CRON_HORIZON_YEARS
        )
        matches.get_next(datetime)
    except CroniterBadDateError:
        raise ValueError(
            f"{expr!r} never fires: no date in the next {CRON_HORIZON_YEARS} years matches it "
            "(a day the month does not have, such as 30 February?)"
        ) from None
    except (CroniterError, TypeError):  # croniter raises TypeError for some mixed ranges
        raise ValueError(f"{expr!r} is not a valid cron expression") from None


def _day_may_not_exist(expr: str) -> bool:
    """Whether the days an expression names might match no date, so that only a search of the
    calendar can tell. Any day of the month with plain weekdays (or any) matches every month:
    the common case, answered without the search (which costs about twice the parse)."""
    _, _, day_of_month, _, day_of_week = expr.split()
    return day_of_month not in ("*", "?") or "#" in day_of_week


@cache
def _iana_zones() -> frozenset[str]:
    """The IANA zone names, as zoneinfo lists them (the tzdata package's and the system's) less
    "localtime": a system's link to its own zone, not a zone of its own, which zoneinfo lists
    when /usr/share/zoneinfo has it (it leaves "posixrules" out itself). UTC always."""
    return frozenset(zoneinfo.available_timezones() - {"localtime"} | {"UTC"})


def validate_timezone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA time zone ``name``, checked for shape and length before zoneinfo opens a file,
    and against the IANA names: zoneinfo also opens files that are no zone of the database
    (localtime, posixrules, posix/..., right/...), whose meaning depends on the host."""
    unknown = ValueError(f"{name!r} is not a known time zone, e.g. Europe/Paris or UTC")
    if len(name) > MAX_TIMEZONE_LENGTH:
        raise ValueError(
            f"the time zone name is too long: at most {MAX_TIMEZONE_LENGTH} characters"
        )
    if not _TIMEZONE_NAME.match(name) or name not in _iana_zones():
        raise unknown
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder (America)
        raise unknown from None


def parse_instant(text: str) -> At:
    """An ISO 8601 instant; a naive one is read as UTC."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 time, e.g. 2030-01-01T09:00:00Z") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return At(when=when)


def describe(schedule: Definition | None) -> str:
    """The schedule in words, for the admin and the CLI."""
    if schedule is None:
        return "continuous"
    if isinstance(schedule, Triggered):
        return "when triggered (after its upstreams, run now, the API)"
    if isinstance(schedule, Every):
        return f"every {_describe_seconds(schedule.seconds)}"
    if isinstance(schedule, Cron):
        words = get_description(schedule.expr)
        return f"{words} ({schedule.tz})"
    if isinstance(schedule, Solar):
        event = schedule.event.replace("_", " ")
        return f"daily at {event} ({schedule.latitude:g}, {schedule.longitude:g})"
    return f"once at {schedule.when.astimezone(UTC).isoformat()}"


def format_duration(seconds: int) -> str:
    """The inverse of ``parse_duration`` for whole seconds: 90 → ``"90s"``, 3600 → ``"1h"``."""
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _describe_seconds(seconds: int) -> str:
    for unit, size in (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return unit if count == 1 else f"{count} {unit}s"
    return "second" if seconds == 1 else f"{seconds} seconds"
