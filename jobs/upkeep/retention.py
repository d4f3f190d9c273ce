"""History retention: delete finished runs older than the age configured for their status
(``JOBS_RETENTION_<STATUS>``), heartbeat rows of beats long gone, and incidents resolved longer
ago than the bad runs they were about are kept (with their notifications, once all are sent).

Only runs already counted into ``RunRollup`` (``jobs.upkeep.rollups.fold``, done first) are deleted,
so the counters of ``/metrics`` never go backwards. Runs are deleted in batches, each its own
short transaction, so pruning a large backlog never holds long locks. Age is by slot
(``scheduled_for``), which the ``(status, scheduled_for)`` index serves.

A pass that deleted runs ends with a plain ``VACUUM`` of the run and lease tables (unless
``JOBS_RETENTION_VACUUM`` is off): it makes the space of the deleted runs, and of the row
versions every claim, finish and renewal leaves behind, reusable at once, so the tables keep
their size at a steady rate of runs whatever autovacuum's settings or lag (with its default
scale factor it waits for a fifth of a large table to be dead; a server may run without it).
It takes no lock that blocks reads or writes and skips a table another vacuum holds.

Called by ``manage.py jobs prune`` and, through ``prune_if_due``, by the maintenance loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from jobs.conf import get_ops_conf
from jobs.guard import lease
from jobs.models import BeatHeartbeat, DeliveryState, Incident, Job, JobRun, RunStatus
from jobs.upkeep import rollups

log = logging.getLogger(__name__)

BATCH_SIZE = 2000
# A beat's heartbeat row is named host:pid, so every restart adds one; old ones go.
BEAT_HEARTBEAT_RETENTION = timedelta(days=1)


@dataclass(frozen=True)
class PruneResult:
    deleted: Mapping[str, int] = field(default_factory=dict)  # status → runs deleted
    cutoffs: Mapping[str, datetime] = field(default_factory=dict)  # status → slots before
    beat_heartbeats: int = 0
    incidents: int = 0
    vacuumed: bool = False

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


def cutoffs(now: datetime, retention: Mapping[str, timedelta | None]) -> dict[str, datetime]:
    """Status → the slot before which its runs go; statuses kept forever are absent."""
    return {status: now - age for status, age in retention.items() if age is not None}


def prune(
    now: datetime | None = None,
    *,
    retention: Mapping[str, timedelta | None] | None = None,
    dry_run: bool = False,
    batch_size: int = BATCH_SIZE,
) -> PruneResult:
    """Delete what retention says is old enough (``dry_run``: only count it)."""
    now = now or timezone.now()
    limits = cutoffs(now, get_ops_conf().retention if retention is None else retention)
    if not dry_run:
        rollups.fold(budget_seconds=None)
    deleted: dict[str, int] = {}
    for status, before in limits.items():
        old = JobRun.objects.filter(status=status, scheduled_for__lt=before)
        if dry_run:
            deleted[status] = old.count()
        else:
            # A run another folder still holds is left for the next pass.
            deleted[status] = _delete_in_batches(old.filter(folded=True), batch_size)
    stale_beats = BeatHeartbeat.objects.filter(last_seen__lt=now - BEAT_HEARTBEAT_RETENTION)
    beats = stale_beats.count() if dry_run else stale_beats.delete()[0]
    old_incidents = _old_incidents(limits)
    incidents = (
        old_incidents.count() if dry_run else old_incidents.delete()[1].get(Incident._meta.label, 0)
    )
    vacuumed = not dry_run and sum(deleted.values()) > 0 and _vacuum()
    result = PruneResult(
        deleted=deleted,
        cutoffs=limits,
        beat_heartbeats=beats,
        incidents=incidents,
        vacuumed=vacuumed,
    )
    if result.total and not dry_run:
        log.info(
            "pruned %d run(s)",
            result.total,
            extra={"action": "pruned", "deleted": dict(result.deleted)},
        )
    return result


def _old_incidents(limits: Mapping[str, datetime]) -> QuerySet[Incident]:
    """Incidents resolved before the runs they were about are pruned (the latest cutoff of
    failed, missed and lost; none while one of them is kept forever), none with a notification
    still to send."""
    bad = [limits.get(status) for status in (RunStatus.FAILED, RunStatus.MISSED, RunStatus.LOST)]
    if any(cutoff is None for cutoff in bad):
        return Incident.objects.none()
    return Incident.objects.filter(resolved_at__lt=max(c for c in bad if c is not None)).exclude(
        deliveries__state=DeliveryState.PENDING
    )


# The tables whose dead row versions a steady stream of runs makes: deleted runs, and every
# claim, finish and lease renewal (an UPDATE is a new row version).
_VACUUMED = ("jobs_jobrun", "jobs_lease")


def _vacuum() -> bool:
    """``VACUUM`` the run and lease tables, when set and possible (PostgreSQL, outside a
    transaction); whether it ran."""
    if not get_ops_conf().retention_vacuum or connection.vendor != "postgresql":
        return False
    if connection.in_atomic_block:  # VACUUM cannot run inside a transaction block
        return False
    started = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM (SKIP_LOCKED, ANALYZE) {', '.join(_VACUUMED)}")
    log.info(
        "vacuumed %s in %.2f s",
        ", ".join(_VACUUMED),
        time.monotonic() - started,
        extra={"action": "vacuumed"},
    )
    return True


def _delete_in_batches(runs: QuerySet[JobRun], batch_size: int) -> int:
    total = 0
    while True:
        with transaction.atomic():
            ids = list(runs.order_by("scheduled_for").values_list("id", flat=True)[:batch_size])
            if not ids:
                return total
            _forget_run_leases(ids)
            # Through the ORM: runs that retried these keep their row (retry_of is SET_NULL).
            JobRun.objects.filter(id__in=ids).delete()
        total += len(ids)
        if len(ids) < batch_size:
            return total


def _forget_run_leases(run_ids: list[int]) -> int:
    """The leases that runs among ``run_ids`` took of their own (``lease.run_key``: a Django
    task's enqueued runs), which nobody takes again: deleted with the runs, once lapsed."""
    runs = JobRun.objects.filter(id__in=run_ids).exclude(lease_key="")
    own = [
        key
        for run_id, key, job_name in runs.values_list("id", "lease_key", "job__name")
        if key == lease.run_key(Job(name=job_name).lock_key, run_id)
    ]
    return lease.forget(own)


_last_prune: float | None = None
_lock = threading.Lock()


def prune_if_due() -> PruneResult | None:
    """For the maintenance loop: ``prune()`` at most every ``JOBS_RETENTION_INTERVAL`` seconds
    in this process (a second node pruning too is harmless, only redundant)."""
    global _last_prune
    interval = get_ops_conf().retention_interval
    with _lock:
        now = time.monotonic()
        if _last_prune is not None and now - _last_prune < interval:
            return None
        _last_prune = now
    return prune()
