"""The run records of continuous jobs: one per tenure (trigger ``continuous``).

A tenure starts when a node acquires the job's lease and ends when the function returns, the
lease is handed back or lost. Each function is one statement (PostgreSQL). Like every run, a
tenure's outcome is fenced: written as asked only while its token still holds a live lease,
``lost`` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from jobs.guard import lease
from jobs.models import RunStatus


@dataclass(frozen=True)
class Begun:
    run_id: int
    started_at: datetime
    # Earlier tenures of the job found still running: their node died or stalled.
    orphans_closed: int


@dataclass(frozen=True)
class Orphan:
    run_id: int
    job_id: int
    node: str


# Taking over: the previous tenures of the same lease (lower tokens) that never finished are
# recorded lost in the same round trip that records the new tenure.
_BEGIN = """
WITH orphaned AS (
    UPDATE jobs_jobrun
       SET status = 'lost', finished_at = now(),
           error = format('its node stopped renewing the lease; taken over by %%s with token %%s',
                          %(node)s::text, %(token)s::bigint)
     WHERE job_id = %(job_id)s AND trigger = 'continuous' AND status = 'running'
       AND lease_key = %(key)s AND fencing_token < %(token)s
    RETURNING id
)
INSERT INTO jobs_jobrun (job_id, scheduled_for, status, trigger, attempt, fencing_token,
                         lease_key, node, pid, started_at)
VALUES (%(job_id)s, now(), 'running', 'continuous', 1, %(token)s, %(key)s, %(node)s, %(pid)s,
        now())
RETURNING id, started_at, (SELECT count(*) FROM orphaned)
"""

# Guarantee 3 for tenures: the outcome asked for is written only while the token still holds a
# live lease; otherwise the tenure is lost (its function may have acted after the lease lapsed).
# Unlike a run's finish it does not lock the lease row: it gives no lease back, and a takeover
# racing it is settled by the run row, which both update only while it is 'running' (begin's
# `orphaned`): whichever commits first, the tenure is recorded once. Its writes are fenced by
# ctx.fenced(), which does lock the lease row. The run by its id alone (jobs.guard.run_records).
_FINISH = f"""
WITH lease AS (
    SELECT EXISTS (SELECT 1 FROM jobs_lease
                    WHERE key = %(key)s AND token = %(token)s AND {lease.lease_live_pg()}) AS held
)
UPDATE jobs_jobrun
   SET status = CASE WHEN lease.held THEN %(status)s ELSE 'lost' END,
       error = CASE WHEN lease.held OR %(error)s <> '' THEN %(error)s
                    ELSE 'the lease lapsed before the tenure ended' END,
       finished_at = now(), traceback = %(traceback)s, result = %(result)s::jsonb
  FROM lease
 WHERE id = %(run_id)s AND status IS NOT DISTINCT FROM 'running'
   AND fencing_token = %(token)s
RETURNING status
"""

# Tenures whose lease lapsed while nobody took the job over (it was paused meanwhile, or no
# node could run it): still recorded lost, so that nothing stays "running" forever.
_CLOSE_ORPHANS = f"""
UPDATE jobs_jobrun AS r
   SET status = 'lost', finished_at = now(),
       error = 'its node stopped renewing the lease (dead, paused or cut off from the database)'
 WHERE r.trigger = 'continuous' AND r.status = 'running' AND NOT {lease.run_lease_live_pg()}
RETURNING r.id, r.job_id, r.node
"""


def begin(*, job_id: int, key: str, token: int, node: str, pid: int) -> Begun:
    """Record a new tenure of ``job_id`` under the lease (``key``, ``token``) just acquired."""
    row = _one_row(_BEGIN, {"job_id": job_id, "key": key, "token": token, "node": node, "pid": pid})
    assert row is not None  # an INSERT … RETURNING always returns its row
    return Begun(run_id=int(row[0]), started_at=row[1], orphans_closed=int(row[2]))


def finish(
    run_id: int,
    *,
    key: str,
    token: int,
    status: RunStatus,
    error: str = "",
    traceback: str = "",
    result: str | None = None,
) -> str | None:
    """Record how the tenure ended; returns the status recorded (``lost`` if the lease lapsed),
    or ``None`` when the run was already closed (taken over, or the job was removed)."""
    params: dict[str, Any] = {
        "run_id": run_id,
        "key": key,
        "token": token,
        "status": status.value,
        "error": error,
        "traceback": traceback,
        "result": result,
    }
    row = _one_row(_FINISH, params)
    return None if row is None else str(row[0])


def _one_row(statement: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
    """The row a statement of one row at most returns (``None`` when it returns none)."""
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchone()


def close_orphans() -> list[Orphan]:
    """Record lost every running tenure whose lease is no longer live."""
    with connection.cursor() as cursor:
        cursor.execute(_CLOSE_ORPHANS)
        rows = cursor.fetchall()
    return [Orphan(run_id=int(r[0]), job_id=int(r[1]), node=str(r[2])) for r in rows]


def status_for(stopped_for: RunStatus | None, *, lease_lost: bool, raised: bool) -> RunStatus:
    """What a tenure that just ended should be recorded as (before fencing)."""
    if lease_lost:
        return RunStatus.LOST
    if raised:
        return RunStatus.FAILED
    return stopped_for or RunStatus.SUCCEEDED
