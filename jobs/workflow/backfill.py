"""Backfill: the runs of past slots that have none, made on request (``jobs backfill``, the API,
the admin), one per slot as the beats would have made them.

A backfill's runs go out one at a time per job, oldest slot first: each waits unpublished until
the job's previous backfill run ends, so a backfill never competes with itself for the job's
lease and a thousand of them never flood a queue. Its start deadline counts from that release.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery import current_app
from django.core.exceptions import ValidationError
from django.db import connection, transaction

from jobs.beat.slot_fates import Fate, readable_schedule
from jobs.broker.dispatch import publish_many
from jobs.exceptions import NotTriggerable
from jobs.guard import after_finish
from jobs.guard.run_records import Claim, NewRun, calendar_status_pg, skip_reason_pg
from jobs.models import SLOT_TRIGGERS, Job, JobKind, JobRun, Trigger
from jobs.schedule import calendars, slots
from jobs.schedule.kinds import Schedule

log = logging.getLogger(__name__)

# How many runs one backfill may make unless told otherwise, and at most.
DEFAULT_MAX_RUNS = 10_000
MAX_RUNS_LIMIT = 100_000
_BEFORE = timedelta(microseconds=1)


@dataclass(frozen=True)
class BackfillPlan:
    """The slots ``since <= slot <= until`` of ``job`` that have no run yet (``missing``, in
    order), and how many in the range have one (``on_record``)."""

    job: Job
    since: datetime
    until: datetime
    missing: tuple[datetime, ...]
    on_record: int
    # Why the job's calendar skips each missing slot ("" when it runs), as the beats decide.
    reasons: tuple[str, ...] = ()
    schedule: Schedule | None = None  # the job's schedule, read once by the plan


@dataclass(frozen=True)
class BackfillResult:
    plan: BackfillPlan
    created: int  # runs this call made (a concurrent backfill may have made the others)
    dry_run: bool
    # A dry run's preview: each slot it would make a run for, with that run's fate.
    fates: tuple[Fate, ...] = ()


def plan(
    job: Job, since: datetime, until: datetime, *, now: datetime, max_runs: int = DEFAULT_MAX_RUNS
) -> BackfillPlan:
    """What a backfill of ``job`` over ``[since, until]`` would make; ``ValidationError`` naming
    ``since``, ``until``, ``max_runs`` or ``schedule`` when it cannot, ``NotTriggerable`` for a
    continuous job (no slots)."""
    if job.kind == JobKind.CONTINUOUS:
        raise NotTriggerable(f"{job.name!r} is a continuous job: it has no slots to backfill")
    if not 1 <= max_runs <= MAX_RUNS_LIMIT:
        raise ValidationError({"max_runs": [f"Must be between 1 and {MAX_RUNS_LIMIT:,}."]})
    if since > until:
        raise ValidationError({"until": ["Must not be before since."]})
    if since < slots.EPOCH:
        # Slots are counted from it; and a date near year 1 has no room for the walk's arithmetic.
        raise ValidationError({"since": [f"Must not be before {slots.EPOCH.isoformat()}."]})
    if until > now:
        raise ValidationError(
            {"until": [f"Must not be in the future (now is {now.isoformat(timespec='seconds')}): "
                       "the beats make the slots to come."]}
        )  # fmt: skip
    schedule = readable_schedule(job)
    on_record = set(
        JobRun.objects.filter(
            job=job, trigger__in=SLOT_TRIGGERS, scheduled_for__gte=since, scheduled_for__lte=until
        ).values_list("scheduled_for", flat=True)
    )
    missing: list[datetime] = []
    # Only the slots in the job's active period are walked: a range of decades around an active
    # week walks that week, not every slot of the decades.
    first, last = calendars.active_span(since, until, job.active_from, job.active_until)
    slot = slots.next_slot(schedule, first - _BEFORE)
    while slot is not None and slot <= last:
        if slot not in on_record:
            if len(missing) == max_runs:
                raise ValidationError(
                    {"max_runs": [f"The range has more than {max_runs:,} slots without a run: "
                                  "narrow it, or raise the cap."]}
                )  # fmt: skip
            missing.append(slot)
        slot = slots.next_slot(schedule, slot)
    zone = calendars.time_zone_of(schedule)
    try:
        # The beats' verdict: what they skip is recorded skipped; after the job expired, they
        # make no run, nor does a backfill.
        verdicts = [(slot, calendars.verdict(slot, job, zone=zone)) for slot in missing]
    except ValueError as exc:
        raise ValidationError({"holiday_calendar": [str(exc)]}) from None
    kept = [(slot, verdict.reason) for slot, verdict in verdicts if verdict.scheduled]
    return BackfillPlan(
        job,
        since,
        until,
        tuple(slot for slot, _ in kept),
        len(on_record),
        tuple(reason for _, reason in kept),
        schedule,
    )


# One run per slot that has none, in one statement; the unique index one_run_per_slot decides
# between concurrent backfills (and a beat), so each slot gets one run however many try. A slot
# in a blackout window or that the job's calendar skips is recorded skipped, as the beats do.
_INSERT_BACKFILL = f"""
INSERT INTO jobs_jobrun (job_id, scheduled_for, trigger, status, finished_at, error)
SELECT %(job)s, slot, 'backfill', {calendar_status_pg("why")}
  FROM (SELECT t.slot,
               {skip_reason_pg("%(job)s", "t.slot", "t.reason")} AS why
          FROM unnest(%(slots)s::timestamptz[], %(reasons)s::text[]) AS t(slot, reason)) AS d
ON CONFLICT (job_id, scheduled_for) WHERE trigger IN ('scheduled', 'backfill') DO NOTHING
"""


def create(backfill: BackfillPlan) -> int:
    """Make the runs of ``backfill``; how many this call made. They wait for their release."""
    if not backfill.missing:
        return 0
    with connection.cursor() as cursor:
        reasons = list(backfill.reasons) or [""] * len(backfill.missing)
        params: dict[str, Any] = {
            "job": backfill.job.pk,
            "slots": list(backfill.missing),
            "reasons": reasons,
        }
        cursor.execute(_INSERT_BACKFILL, params)
        return cursor.rowcount


# Releasers serialise on a transaction lock, so two (a worker and maintenance) never both see
# "nothing in flight" for one job; it ends with the transaction, so it is safe behind PgBouncer.
# Its key is the module's old path, kept: releasers of every version must take the same lock.
_SERIALISE = "SELECT pg_advisory_xact_lock(hashtext('jobs.backfill'))"

# The oldest waiting backfill run of each job (of ``jobs``, or every job with a backfill under
# way) that has none in flight (released and not yet ended): released now, for the caller to
# publish. Per job, both lookups are ranges of the index jobrun_backfill_pending (job, released,
# slot), so the cost does not grow with the backlog.
_RELEASE_NEXT = """
WITH candidates AS (
    SELECT unnest(%(jobs)s::bigint[]) AS job_id WHERE %(jobs)s::bigint[] IS NOT NULL
    UNION
    SELECT DISTINCT p.job_id FROM jobs_jobrun AS p
     WHERE %(jobs)s::bigint[] IS NULL
       AND p.trigger = 'backfill' AND p.status IN ('scheduled', 'running')
),
next AS (
    SELECT w.id
      FROM candidates AS c
     CROSS JOIN LATERAL (
            SELECT o.id FROM jobs_jobrun AS o
             WHERE o.job_id = c.job_id AND o.trigger = 'backfill' AND o.status = 'scheduled'
               AND o.released_at IS NULL
             ORDER BY o.scheduled_for LIMIT 1) AS w
     WHERE NOT EXISTS (SELECT 1 FROM jobs_jobrun AS f
                        WHERE f.job_id = c.job_id AND f.trigger = 'backfill'
                          AND f.status IN ('scheduled', 'running') AND f.released_at IS NOT NULL)
)
UPDATE jobs_jobrun AS r SET released_at = now(), dispatched_at = now()
  FROM next WHERE r.id = next.id
RETURNING r.id, r.job_id, r.scheduled_for
"""


def release_next(job_ids: Collection[int] | None = None) -> list[NewRun]:
    """Release the next backfill run of each job (of ``job_ids``, or every job) that has none
    in flight; the runs released, for the caller to publish."""
    params = {"jobs": None if job_ids is None else list(job_ids)}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_SERIALISE)
        cursor.execute(_RELEASE_NEXT, params)
        return [NewRun(run_id=r[0], job_id=r[1], scheduled_for=r[2]) for r in cursor.fetchall()]


def release_and_publish(job_ids: Collection[int] | None = None, producer: Any = None) -> int:
    """``release_next``, then publish what it released; a lost publish is maintenance's to
    repeat (the run is released, so it is re-published like any stranded run)."""
    released = release_next(job_ids)
    if not released:
        return 0
    jobs = Job.objects.in_bulk({run.job_id for run in released})
    runs = [(jobs[run.job_id], run.run_id, run.scheduled_for) for run in released]
    with current_app.producer_or_acquire(producer) as acquired:
        return publish_many(runs, producer=acquired)


def _release_after_end(claim: Claim) -> None:
    # The job's next backfill run released now rather than at the next maintenance pass.
    if claim.trigger == Trigger.BACKFILL:
        release_and_publish([claim.job_id])


after_finish.register("releasing the next backfill run", _release_after_end)
