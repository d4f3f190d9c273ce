"""What the beats will make of a job's slots, told before they come: each slot's fate (it runs;
it is recorded skipped by a blackout window or the job's calendar; no run at all, outside the job's
active period, after it expired or while it is paused) and the DST changes it meets.

Worked out by the code the beats fire from, not a copy of it: the slots by the schedule's kind
(``jobs.schedule.slots``), the calendar's verdict by ``jobs.schedule.calendars.verdict`` (which
the beat's ``_apply_calendars`` asks), and the blackout window by the very SQL fragment the insert
of a slot's run reads (``jobs.guard.run_records.skip_reason_pg``). ``jobs upcoming``, ``GET
/api/jobs/{name}/upcoming``, the job's admin page and a backfill's dry run show it::

    fates = upcoming(job, since=database_now(), count=10)
    [(f.slot, f.outcome, f.reason) for f in fates]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo

from django.core.exceptions import ValidationError
from django.db import connection

from jobs.beat.entries import schedule_of
from jobs.exceptions import NotTriggerable
from jobs.guard.run_records import blackout_of_pg, skip_reason_pg
from jobs.models import Job, JobKind
from jobs.schedule import calendars, dst, slots
from jobs.schedule.kinds import Schedule

# How many slots one preview lists unless told otherwise, and at most.
DEFAULT_COUNT = 10
MAX_COUNT = 1000
# No slot is listed from here on: the slot after (and a zone's offset) would leave datetime's
# range, which ends with year 9999.
HORIZON = datetime(9999, 1, 1, tzinfo=UTC)
_BEFORE = timedelta(microseconds=1)


class Outcome(StrEnum):
    RUNS = "runs"  # a run is recorded and sent to a worker
    SKIPPED = "skipped"  # a run is recorded skipped, saying why (a blackout, the calendar)
    NOT_SCHEDULED = "not scheduled"  # no run at all: inactive, expired or paused


@dataclass(frozen=True)
class Fate:
    """One slot and what the beats make of it."""

    slot: datetime  # UTC
    zone: str  # the zone its days (and DST) are judged in
    outcome: Outcome
    # Why it is skipped (the error its run is recorded with) or not scheduled; "" when it runs.
    reason: str
    blackout: str  # the name of the blackout window that skips it, "" for none
    dst: tuple[str, ...]  # the DST changes it crosses, and what they do to it

    @property
    def local(self) -> datetime:
        """The slot on the job's wall clock."""
        return self.slot.astimezone(ZoneInfo(self.zone))

    @property
    def local_words(self) -> str:
        """The slot on the job's wall clock, for people: ``2027-03-28 03:00 CEST``."""
        local = self.local
        return f"{_clock_words(local)} {local.tzname()}"

    @property
    def utc_words(self) -> str:
        """The slot in UTC, for people: ``2027-03-28 01:00`` (``01:00:20``: seconds when any)."""
        return _clock_words(self.slot.astimezone(UTC))


def _clock_words(moment: datetime) -> str:
    # Seconds only when a slot has some (an interval of 20 s): minutes alone would print three
    # slots of one minute alike.
    return f"{moment:%Y-%m-%d %H:%M}" if not moment.second else f"{moment:%Y-%m-%d %H:%M:%S}"


def schedule_to_preview(job: Job) -> Schedule:
    """The schedule of ``job``: ``NotTriggerable`` for a continuous job, ``ValidationError`` on
    ``schedule`` when it has none or it cannot be read."""
    if job.kind == JobKind.CONTINUOUS:
        raise NotTriggerable(f"{job.name!r} is a continuous job: it has no slots")
    return readable_schedule(job)


def readable_schedule(job: Job) -> Schedule:
    """The schedule the beats fire ``job`` by; ``ValidationError`` on ``schedule`` when it has
    none or it cannot be read."""
    try:
        schedule = schedule_of(job.periodic_task)
    except ValueError as exc:
        raise ValidationError({"schedule": [str(exc)]}) from None
    if schedule is None:
        raise ValidationError({"schedule": ["The job has no schedule."]})
    return schedule


def upcoming(job: Job, *, since: datetime, count: int = DEFAULT_COUNT) -> list[Fate]:
    """The first ``count`` slots of ``job`` at or after ``since``, each with its fate. Raises
    ``NotTriggerable`` for a continuous job, ``ValidationError`` naming ``count``, ``since``,
    ``schedule`` or ``holiday_calendar``."""
    if not 1 <= count <= MAX_COUNT:
        raise ValidationError({"count": [f"Must be between 1 and {MAX_COUNT:,}."]})
    if since < slots.EPOCH:
        raise ValidationError({"since": [f"Must not be before {slots.EPOCH.isoformat()}."]})
    if since >= HORIZON:
        raise ValidationError({"since": [f"Must be before {HORIZON.isoformat()}."]})
    schedule = schedule_to_preview(job)
    found: list[datetime] = []
    try:
        slot = slots.next_slot(schedule, since - _BEFORE)
        while slot is not None and slot < HORIZON and len(found) < count:
            found.append(slot)
            slot = slots.next_slot(schedule, slot)
    except ValueError as exc:  # e.g. a cron expression that never fires
        raise ValidationError({"schedule": [str(exc)]}) from None
    return of_slots(job, schedule, found)


def of_slots(job: Job, schedule: Schedule, chosen: Sequence[datetime]) -> list[Fate]:
    """The fates of ``chosen`` slots (ascending) of ``job``, whose schedule is ``schedule``."""
    zone = calendars.time_zone_of(schedule)
    try:
        verdicts = [calendars.verdict(slot, job, zone=zone) for slot in chosen]
    except ValueError as exc:
        raise ValidationError({"holiday_calendar": [str(exc)]}) from None
    skips = _skip_reasons(job.pk, chosen, [verdict.reason for verdict in verdicts])
    fates: list[Fate] = []
    previous = slots.previous_slot(schedule, chosen[0]) if chosen else None
    for slot, verdict in zip(chosen, verdicts, strict=True):
        notes = tuple(dst.notes(schedule, slot, zone, previous=previous))
        previous = slot
        fates.append(_fate(job, slot, zone, verdict, skips.get(slot), notes))
    return fates


def _fate(
    job: Job,
    slot: datetime,
    zone: str,
    verdict: calendars.Verdict,
    skip: tuple[str, str] | None,
    notes: tuple[str, ...],
) -> Fate:
    paused = _paused(job, slot)
    if not verdict.scheduled or paused:
        reason = verdict.reason if not verdict.scheduled else paused
        return Fate(slot, zone, Outcome.NOT_SCHEDULED, reason, "", notes)
    reason, blackout = skip or ("", "")
    outcome = Outcome.SKIPPED if reason else Outcome.RUNS
    return Fate(slot, zone, outcome, reason, blackout, notes)


def _paused(job: Job, slot: datetime) -> str:
    """Why a paused job's beats make nothing of ``slot`` (""; not paused by then)."""
    if job.enabled:
        return ""
    if job.paused_until is None:
        return "paused: until someone resumes the job"
    if slot <= job.paused_until:
        return f"paused: until {job.paused_until.isoformat()}"
    return ""


# Each slot's skip reason as the insert of its run records it, and the blackout window's name.
_SKIPS = f"""
SELECT t.slot, {skip_reason_pg("%(job)s", "t.slot", "t.reason")},
       coalesce({blackout_of_pg("%(job)s", "t.slot")}, '')
  FROM unnest(%(slots)s::timestamptz[], %(reasons)s::text[]) AS t(slot, reason)
"""


def _skip_reasons(
    job_id: int, chosen: Sequence[datetime], reasons: Sequence[str]
) -> dict[datetime, tuple[str, str]]:
    if not chosen:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_SKIPS, {"job": job_id, "slots": list(chosen), "reasons": list(reasons)})
        return {slot: (why, blackout) for slot, why, blackout in cursor.fetchall()}
