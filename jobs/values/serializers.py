"""How jobs and runs are shown to people and clients: the same words, records and links in the
admin, the dashboard and the JSON API."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from jobs.beat import entries, schedule_errors
from jobs.beat.slot_fates import Fate
from jobs.broker.messages import task_id_for
from jobs.conf import get_ops_conf
from jobs.models import AuditEntry, Job, JobKind, JobRun, RunStatus, ScheduleError, Trigger
from jobs.registry import POLICY_FIELDS
from jobs.schedule import slots
from jobs.schedule.kinds import Triggered, describe
from jobs.workflow.backfill import BackfillResult


def schedule_words(job: Job) -> str:
    """The schedule in words; a beat entry that cannot be read says so instead of failing."""
    if job.kind == JobKind.TRIGGERED:
        return describe(Triggered())
    try:
        return describe(entries.schedule_of(job.periodic_task))
    except Exception as exc:  # any row, however it was written, must not break a page
        return f"unreadable schedule: {schedule_errors.describe(exc)}"


def schedule_error(job: Job) -> str | None:
    """Why no beat can schedule ``job`` (``ScheduleError``), if it is broken."""
    try:
        return job.schedule_error.error
    except ScheduleError.DoesNotExist:
        return None


def next_slot(job: Job, now: datetime) -> datetime | None:
    """The job's next slot after ``now``; ``None`` when paused, continuous, finished, expired
    or broken."""
    if not job.enabled or job.periodic_task is None:
        return None
    try:
        schedule = entries.schedule_of(job.periodic_task)
        slot = None if schedule is None else slots.next_slot(schedule, now)
    except Exception:  # an unreadable entry, a cron with no next date: shown as the error
        return None
    return None if slot is None or job.expired(slot) else slot


def next_slot_words(job: Job, now: datetime, when: Callable[[datetime | None], str]) -> str:
    """The next slot as ``when`` writes an instant, or why there is none: paused or expired
    (the admin's job page and list, ``jobs show``)."""
    if job.expired(now):
        return f"none: expired {when(job.expires_at)}"
    if not job.enabled:
        return "none: paused"
    return when(next_slot(job, now))


def flower_task_url(run: JobRun) -> str | None:
    """The run's task in Flower, when ``FLOWER_URL`` is set. A continuous job's tenure is no
    Celery task (its supervisor runs it, no message does), so Flower has no page for it."""
    base = get_ops_conf().flower_url
    if not base or run.trigger == Trigger.CONTINUOUS:
        return None
    return f"{base}/task/{task_id_for(run.pk)}"


def job_record(job: Job, now: datetime) -> dict[str, Any]:
    """A job for the API: its fields, plus what the API adds. Expects ``JOB_DISPLAY_RELATED``
    selected with it."""
    record = job_fields(job)
    record.update(
        next_slot=next_slot(job, now),
        managed_by_code=job.managed_by_code,
        created_at=job.created_at,
        updated_at=job.updated_at,
    )
    return record


def job_fields(job: Job) -> dict[str, Any]:
    """A job's fields as every edge shows them (the CLI's --json keys: the model's names)."""
    record: dict[str, Any] = {
        "name": job.name,
        "task": job.task,
        "kind": job.kind,
        "enabled": job.enabled,
        # Who paused it, why and until when (blank and null while it runs).
        "paused_by": job.paused_by,
        "pause_reason": job.pause_reason,
        "paused_until": job.paused_until,
        "schedule": schedule_words(job),
        "schedule_error": schedule_error(job),
    }
    record.update((name, getattr(job, name)) for name in POLICY_FIELDS)
    record.update(args=job.args, kwargs=job.kwargs, alerts_muted_until=job.alerts_muted_until)
    # What an adopted django-celery-beat row carries (jobs.beat.adoption, jobs.beat.retiring).
    record.update(headers=job.headers, expires_at=job.expires_at, one_off=job.one_off)
    record.update(after=upstream_names(job), before=downstream_names(job))
    return record


def upstream_names(job: Job) -> list[str]:
    """The jobs ``job`` runs after (jobs.workflow.dependencies), by name."""
    if job.pk is None:
        return []
    return sorted(upstream.name for upstream in job.upstreams.all())  # prefetched on lists


def downstream_names(job: Job) -> list[str]:
    """The jobs that run after ``job``, by name."""
    if job.pk is None:
        return []
    return sorted(downstream.name for downstream in job.downstreams.all())


# A run's fields as every edge shows them (the CLI's --json keys: the model's names).
RUN_FIELDS = (
    "id",
    "job",
    "scheduled_for",
    "status",
    "trigger",
    "attempt",
    "fencing_token",
    "node",
    "pid",
    "started_at",
    "finished_at",
    "error",
)


def duration_upper_bound(run: JobRun) -> bool:
    """Whether the run's duration only bounds how long it ran: a lost run ends when it was
    recorded lost, and its worker stopped renewing the lease some time before (up to a lease ttl
    and a recovery pass). No stored row says when: the lease row is the next run's once taken
    again, and a node's heartbeat is the node's, not the run's."""
    return run.status == RunStatus.LOST and run.duration is not None


def duration_words(run: JobRun, seconds: str) -> str:
    """``seconds`` (the duration as a page or the CLI writes it), said to be an upper bound for
    a lost run: the same words in the admin and the CLI."""
    return f"≤ {seconds} (until recorded lost)" if duration_upper_bound(run) else seconds


def run_fields(run: JobRun) -> dict[str, Any]:
    """Expects ``job`` selected with the run."""
    record = {field: getattr(run, field) for field in RUN_FIELDS}
    record["job"] = run.job.name
    return record


def run_record(run: JobRun, *, with_traceback: bool = False) -> dict[str, Any]:
    """A run for the API: its fields, plus what the API adds. Expects ``job`` selected."""
    record = run_fields(run)
    record.update(
        task_id=run.task_id,
        created_at=run.created_at,
        lag_seconds=run.lag,
        duration_seconds=run.duration,
        duration_upper_bound=duration_upper_bound(run),
        idempotency_key=run.idempotency_key or None,
        retry_of=run.retry_of_id,
    )
    if with_traceback:
        record["traceback"] = run.traceback
    return record


def audit_record(entry: AuditEntry) -> dict[str, Any]:
    """An audit entry for the API."""
    return {
        "id": entry.pk,
        "at": entry.at,
        "actor": entry.actor,
        "source": entry.source,
        "action": entry.action,
        "job": entry.job_name or None,
        "target": entry.target or None,
        "before": entry.before,
        "after": entry.after,
    }


def backfill_record(result: BackfillResult) -> dict[str, Any]:
    """What a backfill made (or, dry, would make), for the API and ``jobs backfill --json``."""
    planned = result.plan
    return {
        "job": planned.job.name,
        "since": planned.since,
        "until": planned.until,
        "dry_run": result.dry_run,
        "missing": len(planned.missing),
        "on_record": planned.on_record,
        "created": result.created,
        "first_slot": planned.missing[0] if planned.missing else None,
        "last_slot": planned.missing[-1] if planned.missing else None,
        # A dry run lists each slot it would fill and that run's fate; a real one lists none.
        "slots": [fate_record(fate) for fate in result.fates],
    }


def fate_record(fate: Fate) -> dict[str, Any]:
    """One slot to come (or of a backfill's dry run) and what the beats make of it, for the
    API, ``jobs upcoming --json`` and ``jobs backfill --dry-run --json``."""
    return {
        "slot": fate.slot,
        "local": fate.local.isoformat(),
        "zone": fate.zone,
        "fate": str(fate.outcome),
        "reason": fate.reason or None,
        "blackout": fate.blackout or None,
        "dst": list(fate.dst),
    }
