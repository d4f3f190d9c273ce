"""The built-in schedule kinds, and the parsing/validation of what people type for them.

A schedule is a small frozen value: ``Every`` (an anchored interval), ``Cron`` (a five-field cron
expression in a time zone), ``At`` (one instant) or ``Solar`` (a daily solar event at a place).
Each is a ``jobs.schedule.kind.ScheduleKind``: it carries its slots, its words and its
django-celery-beat row, and is registered once, at the end of this module. Parsing errors
are ``ValueError`` with a message meant for a human; the edges attach it to the field that was
typed.

A cron expression means what Celery's ``crontab`` means (the rows are django-celery-beat's
crontabs): each field is read by Celery's own parser, and a minute is a slot when *every* field
matches it, day of month and day of week included (Unix cron runs on either day field when both
are restricted; Celery needs both). ``canonical_cron`` writes that meaning as an explicit
expression that croniter evaluates with ``day_or=False``.
"""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import cache, lru_cache
from typing import Any

from celery.schedules import ParseException, crontab_parser
from cron_descriptor import ExpressionDescriptor, get_description
from croniter import CroniterBadDateError, CroniterError, croniter
from django.core.exceptions import ValidationError

from jobs.schedule import cron, solar
from jobs.schedule.kind import Row, ScheduleKind, SlotWindow, register

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
# How Celery's crontab reads each field: crontab_parser(max_, min_), values min_..min_+max_-1
# (celery.schedules.crontab.__init__). Day of week: 0 is Sunday, 6 Saturday.
CELERY_FIELD_RANGES = ((60, 0), (24, 0), (31, 1), (12, 1), (7, 0))
# Syntax that croniter (and Unix crons) read but Celery's crontab does not is refused, naming the
# field: a row then means one thing, Celery's (stock celery beat raises on such a row).
_NOT_CELERY_SYNTAX = (
    "croniter reads it, Celery's crontab does not: no L, W, # or ?; Sunday is 0 or sun, not 7; "
    "5-59/15, not 5/15"
)
# A cron that matches no date (30 February) would stop the beat that asks for its next slot, so
# it is refused: it must fire within this many years. (A five-field cron that fires at all
# fires every year, or every leap year for 29 February.)
CRON_HORIZON_YEARS = 5
# IANA names: letters, digits, "_", "+", "-", in "/"-separated parts, the longest 32 characters
# (63: the CrontabSchedule column). No dot, so no "..", and no NUL reaches zoneinfo or the database.
MAX_TIMEZONE_LENGTH = 63
_TIMEZONE_NAME = re.compile(r"[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*\Z")
# Where an interval's slots are anchored when its entry has no start time.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# django-celery-beat keeps the interval in a 32-bit integer column; a longer one would fail in the
# database instead of on the form.
_MAX_INTERVAL_SECONDS = 2**31 - 1
# django-celery-beat's IntervalSchedule periods (its PERIOD_CHOICES), in seconds.
_PERIOD_SECONDS = {
    "days": 86400, "hours": 3600, "minutes": 60, "seconds": 1, "microseconds": 1e-6,
}  # fmt: skip


@dataclass(frozen=True)
class Every(ScheduleKind):
    """Every ``seconds``, on slots anchored at ``anchor`` (the Unix epoch when unset)."""

    phase_of_its_own = True
    form_choice, form_label, form_fields = "interval", "interval", ("every",)
    option = "every"
    seconds: int
    anchor: datetime | None = None

    def __post_init__(self) -> None:
        if self.seconds < 1:
            raise ValueError("the interval must be at least 1 second")

    def latest_slot(self, now: datetime) -> datetime | None:
        anchor = self.anchor or EPOCH
        if now < anchor:
            return None
        step = timedelta(seconds=self.seconds)
        return anchor + ((now - anchor) // step) * step

    def next_slot(self, now: datetime) -> datetime | None:
        anchor = self.anchor or EPOCH
        if now < anchor:
            return anchor
        step = timedelta(seconds=self.seconds)
        return anchor + ((now - anchor) // step + 1) * step

    def window(self, after: datetime, until: datetime, limit: int) -> SlotWindow:
        """Counted, not walked: a week of a one-second schedule costs ``limit`` slots."""
        first, last = self.next_slot(after), self.latest_slot(until)
        if first is None or last is None or last < first:
            return SlotWindow([], 0, None, True)
        step = timedelta(seconds=self.seconds)
        count = (last - first) // step + 1
        listed = min(count, limit)
        slots = [last - step * i for i in range(listed - 1, -1, -1)]
        omitted = count - listed
        return SlotWindow(slots, omitted, first if omitted else None, True)

    def describe(self) -> str:
        return f"every {_describe_seconds(self.seconds)}"

    def form_initial(self) -> dict[str, Any]:
        return {"every": format_duration(self.seconds)}

    @classmethod
    def from_form(cls, data: Mapping[str, Any], stored: ScheduleKind | None) -> Every:
        text = data.get("every") or ""
        if not text.strip():
            raise ValidationError({"every": "Give the interval, e.g. 10s, 5m or 1h30m."})
        try:
            every: Every | None = parse_interval(text)
        except ValueError as exc:
            raise ValidationError({"every": str(exc)}) from None
        except OverflowError:  # more than a timedelta holds
            every = None
        if every is None or every.seconds > _MAX_INTERVAL_SECONDS:
            raise ValidationError({"every": f"{text!r}: the longest interval is 68 years."})
        # Keep the stored anchor when the interval is unchanged: moving it would shift every slot.
        if isinstance(stored, Every) and stored.seconds == every.seconds:
            return stored
        return every

    @classmethod
    def from_option(cls, value: Any, tz: str | None) -> Every:
        if isinstance(value, Every):
            return value
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise TypeError('must be a duration such as "10s" or "1h30m", or a number of seconds')
        return parse_interval(value)

    def row(self) -> Row:
        return Row(
            "interval",
            {"every": self.seconds, "period": "seconds"},
            task_values={"start_time": self.anchor},
        )

    @classmethod
    def from_row(cls, task: Any) -> Every | None:
        if task.interval is None:
            return None
        period = _PERIOD_SECONDS.get(task.interval.period)
        if period is None:
            raise ValueError(f"the interval's period {task.interval.period!r} is not a known unit")
        seconds = int(task.interval.every * period)
        if seconds < 1:
            raise ValueError(f"an interval of {task.interval} is shorter than one second")
        return cls(seconds=seconds, anchor=task.start_time)


@dataclass(frozen=True)
class Cron(ScheduleKind):
    """A five-field cron expression evaluated in the IANA time zone ``tz``, meaning what Celery's
    crontab means (``canonical_cron``); ``expr`` is kept as typed."""

    form_choice, form_label, form_fields = "cron", "cron", ("cron", "timezone")
    option, option_takes_tz = "cron", True
    expr: str
    tz: str = "UTC"

    def __post_init__(self) -> None:
        validate_timezone(self.tz)
        object.__setattr__(self, "expr", validate_cron(self.expr, self.tz))

    @property
    def fields(self) -> list[str]:
        return self.expr.split()

    @property
    def time_zone(self) -> str:
        return self.tz

    def latest_slot(self, now: datetime) -> datetime | None:
        return cron.cron_latest(canonical_cron(self.expr), self.tz, now.astimezone(UTC))

    def next_slot(self, now: datetime) -> datetime | None:
        return cron.cron_next(canonical_cron(self.expr), self.tz, now.astimezone(UTC))

    def wall_times(self, start: datetime, end: datetime) -> list[datetime]:
        return cron.cron_walls(canonical_cron(self.expr), start, end)

    def describe(self) -> str:
        words, days_note = _cron_in_words(self.expr)
        return f"{words} ({self.tz}){days_note}"

    def form_initial(self) -> dict[str, Any]:
        return {"cron": self.expr, "timezone": self.tz}

    @classmethod
    def from_form(cls, data: Mapping[str, Any], stored: ScheduleKind | None) -> Cron:
        expr, tz = data.get("cron") or "", data.get("timezone") or "UTC"
        if not expr.strip():
            raise ValidationError({"cron": "Give a cron expression, e.g. 30 2 * * *."})
        errors: dict[str, str] = {}
        try:
            validate_timezone(tz)
        except ValueError as exc:
            errors["timezone"] = str(exc)
            tz = "UTC"  # the expression is still checked, so both mistakes show at once
        try:
            expr = validate_cron(expr, tz)
        except ValueError as exc:
            errors["cron"] = str(exc)
        if errors:
            raise ValidationError(errors)
        return cls(expr=expr, tz=tz)

    @classmethod
    def from_option(cls, value: Any, tz: str | None) -> Cron:
        if not isinstance(value, str):
            raise TypeError('must be five cron fields as a string, e.g. "0 3 * * *"')
        return cls(expr=value, tz=tz or "UTC")

    def row(self) -> Row:
        minute, hour, day_of_month, month_of_year, day_of_week = self.fields
        return Row(
            "crontab",
            {
                "minute": minute,
                "hour": hour,
                "day_of_month": day_of_month,
                "month_of_year": month_of_year,
                "day_of_week": day_of_week,
                "timezone": self.tz,
            },
        )

    @classmethod
    def from_row(cls, task: Any) -> Cron | None:
        c = task.crontab
        if c is None:
            return None
        expr = f"{c.minute} {c.hour} {c.day_of_month} {c.month_of_year} {c.day_of_week}"
        return cls(expr=expr, tz=str(c.timezone))


@dataclass(frozen=True)
class At(ScheduleKind):
    """Once, at ``when`` (timezone-aware)."""

    once = True
    form_choice, form_label, form_fields = "one_off", "one-off", ("run_at",)
    option = "at"
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

    def latest_slot(self, now: datetime) -> datetime | None:
        return self.when.astimezone(UTC) if self.when <= now else None

    def next_slot(self, now: datetime) -> datetime | None:
        return self.when.astimezone(UTC) if self.when > now else None

    def describe(self) -> str:
        return f"once at {self.when.astimezone(UTC).isoformat()}"

    def form_initial(self) -> dict[str, Any]:
        return {"run_at": self.when}

    @classmethod
    def from_form(cls, data: Mapping[str, Any], stored: ScheduleKind | None) -> At:
        when = data.get("run_at")
        if when is None:
            raise ValidationError({"run_at": "Give the date and time of the run."})
        return cls(when=when)

    @classmethod
    def from_option(cls, value: Any, tz: str | None) -> At:
        if isinstance(value, datetime):
            return cls(when=value)
        if not isinstance(value, str):
            raise TypeError("must be an ISO 8601 time, e.g. 2030-01-01T09:00:00Z")
        return parse_instant(value)

    def row(self) -> Row:
        # Its own row: a clocked row is the one-off's, deleted with it.
        return Row(
            "clocked",
            {"clocked_time": self.when.astimezone(UTC)},
            shared=False,
            task_values={"one_off": True},
        )

    @classmethod
    def from_row(cls, task: Any) -> At | None:
        return None if task.clocked is None else cls(when=task.clocked.clocked_time)


# The events of django-celery-beat's SolarSchedule (celery.schedules.solar).
SOLAR_EVENTS = (
    "dawn_astronomical", "dawn_nautical", "dawn_civil", "sunrise", "solar_noon", "sunset",
    "dusk_civil", "dusk_nautical", "dusk_astronomical",
)  # fmt: skip


@dataclass(frozen=True)
class Solar(ScheduleKind):
    """Once a day at a solar ``event`` (sunrise, sunset, ...) seen from ``latitude`` /
    ``longitude``: django-celery-beat's SolarSchedule, carried over by adoption."""

    form_choice, form_label = "solar", "solar (kept as its entry says)"
    offered_when_new = False  # an adopted SolarSchedule's, kept as it is
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

    def latest_slot(self, now: datetime) -> datetime | None:
        return solar.latest(self, now)

    def next_slot(self, now: datetime) -> datetime | None:
        return solar.following(self, now)

    def describe(self) -> str:
        event = self.event.replace("_", " ")
        return f"daily at {event} ({self.latitude:g}, {self.longitude:g})"

    @classmethod
    def from_form(cls, data: Mapping[str, Any], stored: ScheduleKind | None) -> Solar:
        if not isinstance(stored, Solar):  # the choice is offered only to a solar job
            raise ValidationError({"schedule_type": "Only a solar job keeps a solar schedule."})
        return stored

    def row(self) -> Row:
        return Row(
            "solar",
            {"event": self.event, "latitude": self.latitude, "longitude": self.longitude},
        )

    @classmethod
    def from_row(cls, task: Any) -> Solar | None:
        sun = task.solar
        if sun is None:
            return None
        return cls(event=sun.event, latitude=float(sun.latitude), longitude=float(sun.longitude))


# Any registered kind (jobs.schedule.kind); the built-in ones are registered at the end.
Schedule = ScheduleKind


@dataclass(frozen=True)
class Triggered:
    """No slots of its own: the job runs when triggered (its upstreams' successes, run now, the
    API). Its kind is ``triggered``; it has no beat entry."""

    def describe(self) -> str:
        return "when triggered (after its upstreams, run now, the API)"


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
    """The expression with its fields one space apart, if it is five fields that Celery's crontab
    reads and that fire within ``CRON_HORIZON_YEARS`` in the time zone ``tz`` (a valid one).

    What was typed is kept (it is what the crontab row stores); ``canonical_cron`` gives its
    meaning."""
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
    try:
        canonical = canonical_cron(normalized)
    except ValueError as exc:
        raise ValueError(f"{normalized!r} is not a valid cron expression: {exc}") from None
    if not _fires(canonical, tz, datetime.now(UTC).date()):
        why = "a day the month does not have, such as 30 February?"
        if canonical.split()[4] != "*":
            why = (
                "a day the month does not have, such as 30 February, or days of the month that "
                "are never one of the days of the week? Both must match, as in Celery's crontab"
            )
        raise ValueError(
            f"{normalized!r} never fires: no date in the next {CRON_HORIZON_YEARS} years matches "
            f"it ({why})"
        )
    return normalized


@lru_cache(maxsize=4096)
def canonical_cron(expr: str) -> str:
    """What Celery's crontab means by the five fields of ``expr``, as an explicit expression that
    croniter reads the same way when it is evaluated with ``day_or=False`` (every field must match:
    Celery's AND of day of month and day of week).

    Each field goes through Celery's own parser (``crontab_parser``, with crontab's bounds), so
    every form Celery reads (lists, ranges, wrap-around ranges such as ``fri-mon`` or ``22-2``,
    steps, day and month names) becomes the set of values Celery matches, written as ``*`` (all
    of them), ``*/n`` or ascending ranges and numbers. Cached: beats build thousands of ``Cron``
    values from the same few expressions.
    """
    fields = expr.split()
    if len(fields) != 5:
        raise ValueError(f"{expr!r} is not a cron expression: give five fields")
    return " ".join(
        _canonical_field(_celery_values(name, text, size, low), size, low)
        for name, text, (size, low) in zip(CRON_FIELDS, fields, CELERY_FIELD_RANGES, strict=True)
    )


def _celery_values(name: str, text: str, size: int, low: int) -> set[int]:
    try:
        return crontab_parser(size, low).parse(text)
    except (ValueError, ParseException) as exc:  # what the parser raises for text it cannot read
        raise ValueError(_field_refusal(name, text, exc)) from None


def _field_refusal(name: str, text: str, exc: Exception) -> str:
    reason = str(exc).rstrip(".")
    for pattern, words in _PARSER_MESSAGES:
        reason = pattern.sub(words, reason)
    message = f"the {name} field {text!r} is not valid in Celery's crontab: {reason}"
    if _croniter_reads(name, text):
        message += f" ({_NOT_CELERY_SYNTAX})"
    return message


# Celery's parser messages, in words (its last try at any token is a weekday name).
_PARSER_MESSAGES = (
    (re.compile(r"\AInvalid weekday literal (.*)\Z", re.DOTALL), r"\1 is not a number or a name"),
    (re.compile(r"\AInvalid end range: (\d+) > (\d+)\Z"), r"\1 is above \2"),
    (re.compile(r"\AInvalid beginning range: (\d+) < (\d+)\Z"), r"\1 is below \2"),
)


def _croniter_reads(name: str, text: str) -> bool:
    """Whether croniter accepts ``text`` as the field ``name``: syntax of its own."""
    fields = ["*"] * 5
    fields[CRON_FIELDS.index(name)] = text
    try:
        croniter.expand(" ".join(fields))
    except (CroniterError, TypeError, ValueError):
        return False
    return True


def _canonical_field(values: set[int], size: int, low: int) -> str:
    if len(values) == size:
        return "*"
    ordered = sorted(values)
    if len(ordered) > 1 and ordered[0] == low:
        step = ordered[1] - ordered[0]
        if ordered == list(range(low, low + size, step)):
            return f"*/{step}"
    parts: list[str] = []
    start = previous = ordered[0]
    for value in ordered[1:]:
        if value != previous + 1:
            parts.append(_run(start, previous))
            start = value
        previous = value
    parts.append(_run(start, previous))
    return ",".join(parts)


def _run(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


@lru_cache(maxsize=4096)
def _fires(canonical: str, tz: str, today: date) -> bool:
    """Whether ``canonical`` (``canonical_cron``'s form) matches a date within
    ``CRON_HORIZON_YEARS`` of ``today``. Cached per day: a beat that loads thousands of jobs asks
    once per distinct schedule, and an answer about the next years does not change within a day."""
    if not _day_may_not_exist(canonical):
        return True
    # Matching is on wall-clock times (see jobs.schedule.slots), so start from the zone's wall
    # clock.
    wall = datetime.combine(today, time(), UTC).astimezone(validate_timezone(tz))
    matches = croniter(
        canonical,
        wall.replace(tzinfo=UTC),
        day_or=False,
        max_years_between_matches=CRON_HORIZON_YEARS,
    )
    try:
        matches.get_next(datetime)
    except CroniterBadDateError:
        return False
    return True


def _day_may_not_exist(canonical: str) -> bool:
    """Whether the days an expression names might match no date, so that only a search of the
    calendar can tell. Any day of the month (with any weekdays) matches every month: the common
    case, answered without the search (which costs about twice the parse)."""
    return canonical.split()[2] != "*"


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
    return "continuous" if schedule is None else schedule.describe()


@lru_cache(maxsize=1024)
def _cron_in_words(expr: str) -> tuple[str, str]:
    """cron_descriptor's words for what Celery's crontab runs, and, when both day fields are
    restricted, a note that a day must match both (cron_descriptor's words do not say, and
    Unix cron would run on either).

    A field is described as typed when it is plain cron (``*/15``, ``1-5``, ``mon-fri``) that
    croniter, whose syntax cron_descriptor reads, gives Celery's values, so ``*/15`` stays "every
    15 minutes"; otherwise (``1-5-7``, ``sunday``, ``*/15,5``, a step as wide as the field) by
    its canonical form, so the words say what runs. cron_descriptor fails on some forms it
    should read: then the canonical form is described."""
    typed = expr.split()
    canonical = canonical_cron(expr).split()
    shown = [
        _shown_field(index, text, meant)
        for index, (text, meant) in enumerate(zip(typed, canonical, strict=True))
    ]
    for candidate in dict.fromkeys([" ".join(shown), " ".join(canonical)]):
        try:
            words = get_description(candidate)
            descriptor = ExpressionDescriptor(candidate)
            day_of_month = descriptor.get_day_of_month_description().removeprefix(", ")
            day_of_week = descriptor.get_day_of_week_description().removeprefix(", ")
        except Exception:  # cron_descriptor raises its own and Python's errors alike
            continue
        break
    else:  # pragma: no cover - cron_descriptor read every canonical form fuzzed
        words, day_of_month, day_of_week = f"cron {' '.join(canonical)}", canonical[2], canonical[4]
    if typed[2] == "*" or typed[4] == "*":
        return words, ""
    note = (
        " — only on days that match both the day of month "
        f"({day_of_month or 'any'}) and the day of week "
        f"({day_of_week.removeprefix('only on ') or 'any'}), as in Celery's crontab; "
        "Unix cron would run on either"
    )
    return words, note


# A part of a field in plain cron: *, */n, a number or a name, a range of either, with a step.
_PLAIN_PART = re.compile(r"\*(/\d+)?|(\d+(-\d+)?|[a-z]{3}(-[a-z]{3})?)(/\d+)?", re.IGNORECASE)


def _shown_field(index: int, text: str, canonical: str) -> str:
    if text == canonical:
        return text
    parts = text.split(",")
    plain = all(_PLAIN_PART.fullmatch(part) for part in parts) and text.isascii()
    if not plain or (len(parts) > 1 and "*" in text):
        return canonical  # cron_descriptor says "every 15,5 minutes" for */15,5
    size = CELERY_FIELD_RANGES[index][0]
    if any(int(step) >= size for step in re.findall(r"/(\d+)", text)):
        return canonical  # cron_descriptor would say "every 100 minutes" for minute 0
    try:
        as_typed, as_meant = (_croniter_values(index, field) for field in (text, canonical))
    except (CroniterError, TypeError, ValueError):
        return canonical
    return text if as_typed == as_meant else canonical


def _croniter_values(index: int, text: str) -> Sequence[int | str]:
    fields = ["*"] * 5
    fields[index] = text
    return croniter.expand(" ".join(fields))[0][index]


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


for _kind in (Every, Cron, At, Solar):
    register(_kind)
