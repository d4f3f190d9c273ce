"""The SQL of run records that carries guarantees 1, 3 and 6: one record per slot, a claim that
turns every repeated delivery into a no-op, and a finish that a lapsed holder cannot make.

Each function is one statement (PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from jobs.models import RunStatus


@dataclass(frozen=True)
class NewRun:
    run_id: int
    job_id: int
    scheduled_for: datetime


@dataclass(frozen=True)
class Claim:
    """A run this worker now owns (``status`` is ``running``) or found past its deadline."""

    run_id: int
    job_id: int
    scheduled_for: datetime
    attempt: int
    status: str


# Guarantee 1: the partial unique index makes the first insert of a slot win; every other beat's
# insert of the same slot does nothing and returns no row, so only the winner publishes.
_INSERT_SLOTS = """
INSERT INTO jobs_jobrun (job_id, scheduled_for, trigger)
SELECT job_id, slot, 'scheduled' FROM unnest(%s::bigint[], %s::timestamptz[]) AS t(job_id, slot)
ON CONFLICT (job_id, scheduled_for) WHERE trigger = 'scheduled' DO NOTHING
RETURNING id, job_id, scheduled_for
"""

# The claim moves scheduled → running exactly once. A claim after the start deadline (judged by
# the database clock) moves the run to missed instead, so a late worker never runs it late.
_CLAIM = """
UPDATE jobs_jobrun AS r
   SET status = CASE WHEN now() > r.scheduled_for + make_interval(secs => j.start_deadline)
                     THEN 'missed' ELSE 'running' END,
       started_at = now(),
       finished_at = CASE WHEN now() > r.scheduled_for + make_interval(secs => j.start_deadline)
                          THEN now() END,
       error = CASE WHEN now() > r.scheduled_for + make_interval(secs => j.start_deadline)
                    THEN format('claimed %%s s after its slot, past the start deadline of %%s s',
                                round(extract(epoch FROM now() - r.scheduled_for)::numeric, 1),
                                j.start_deadline)
                    ELSE '' END,
       node = %(node)s, pid = %(pid)s, task_id = %(task_id)s
  FROM jobs_job AS j
 WHERE r.id = %(run_id)s AND r.status = 'scheduled' AND j.id = r.job_id
RETURNING r.id, r.job_id, r.scheduled_for, r.attempt, r.status
"""

_COUNT_DUPLICATE = """
UPDATE jobs_jobrun SET duplicate_deliveries = duplicate_deliveries + 1
 WHERE id = %(run_id)s
RETURNING status
"""

_RECORD_TOKEN = """
UPDATE jobs_jobrun SET fencing_token = %(token)s, lease_key = %(key)s
 WHERE id = %(run_id)s AND status = 'running'
"""

# Guarantee 3: the outcome is written only by the holder of the run's token while its lease is
# live; a holder whose lease lapsed gets 'lost' recorded instead of its outcome.
_FINISH_FENCED = """
UPDATE jobs_jobrun
   SET status = CASE WHEN EXISTS (SELECT 1 FROM jobs_lease
                                   WHERE key = %(key)s AND token = %(token)s
                                     AND expires_at > now())
                     THEN %(status)s ELSE 'lost' END,
       finished_at = now(), error = %(error)s, traceback = %(traceback)s, result = %(result)s::jsonb
 WHERE id = %(run_id)s AND status = 'running' AND fencing_token = %(token)s
RETURNING status
"""

# For outcomes decided without a lease (skipped, unknown function): no token to fence on.
_FINISH_UNLEASED = """
UPDATE jobs_jobrun
   SET status = %(status)s, finished_at = now(), error = %(error)s, traceback = %(traceback)s
 WHERE id = %(run_id)s AND status = 'running'
RETURNING status
"""


def insert_scheduled(pairs: Sequence[tuple[int, datetime]]) -> list[NewRun]:
    """Insert one run per ``(job_id, slot)``; return the ones this caller created."""
    if not pairs:
        return []
    job_ids = [job_id for job_id, _ in pairs]
    slots = [slot for _, slot in pairs]
    with connection.cursor() as cursor:
        cursor.execute(_INSERT_SLOTS, [job_ids, slots])
        return [NewRun(run_id=r[0], job_id=r[1], scheduled_for=r[2]) for r in cursor.fetchall()]


def claim(run_id: int, *, node: str, pid: int, task_id: str) -> Claim | None:
    """Take a scheduled run; ``None`` when it was already taken (a repeated delivery)."""
    params: dict[str, Any] = {"run_id": run_id, "node": node, "pid": pid, "task_id": task_id}
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM, params)
        row = cursor.fetchone()
    if row is None:
        return None
    return Claim(run_id=row[0], job_id=row[1], scheduled_for=row[2], attempt=row[3], status=row[4])


def count_duplicate(run_id: int) -> str | None:
    """Record one more delivery of an already-claimed run; its current status, if it exists."""
    with connection.cursor() as cursor:
        cursor.execute(_COUNT_DUPLICATE, {"run_id": run_id})
        row = cursor.fetchone()
    return None if row is None else str(row[0])


def record_token(run_id: int, *, key: str, token: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_RECORD_TOKEN, {"run_id": run_id, "key": key, "token": token})


def finish_fenced(
    run_id: int,
    *,
    key: str,
    token: int,
    status: RunStatus,
    error: str = "",
    traceback: str = "",
    result: str | None = None,
) -> str | None:
    """Write the outcome if ``token`` still holds ``key``; returns the status recorded, or
    ``None`` if the run was no longer ours (maintenance already recorded it)."""
    params: dict[str, Any] = {
        "run_id": run_id,
        "key": key,
        "token": token,
        "status": status.value,
        "error": error,
        "traceback": traceback,
        "result": result,
    }
    with connection.cursor() as cursor:
        cursor.execute(_FINISH_FENCED, params)
        row = cursor.fetchone()
    return None if row is None else str(row[0])


def finish_unleased(
    run_id: int, *, status: RunStatus, error: str = "", traceback: str = ""
) -> str | None:
    params: dict[str, Any] = {
        "run_id": run_id,
        "status": status.value,
        "error": error,
        "traceback": traceback,
    }
    with connection.cursor() as cursor:
        cursor.execute(_FINISH_UNLEASED, params)
        row = cursor.fetchone()
    return None if row is None else str(row[0])
