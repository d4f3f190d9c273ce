"""The SQL of a run's life on a worker, which carries guarantees 3 and 6: a claim that turns
every repeated delivery into a no-op, a finish that a lapsed holder cannot make, and the record
of a run whose worker died (``mark_lost_runs``, for jobs.upkeep.recovery). A slot's first record
is the beat's (jobs.beat.slot_records), the sweeps of scheduled runs maintenance's
(jobs.upkeep.sweeps); the fragments they share (a run's deadline origin, a slot's blackout, a
calendar's verdict, the retry) are written here once.

Each function is one statement (PostgreSQL). The claim also takes the run's lease, and the finish
also gives it back (and records a retry when one is due), so a guarded run costs the database two
round trips; the lease parts are the fragments of ``jobs/guard/lease.py``, where all lease SQL
lives, except in the claim and the finish, whose PL/pgSQL functions (jobs/sql/) repeat them.

A statement about one run (or about the runs one upstream run made) finds it by that column
alone and tests the status it must have with ``IS NOT DISTINCT FROM``, which is no index
condition: with ``status = 'scheduled'`` the planner may walk the status index instead of the
primary key whenever it believes few runs have that status (a fresh table, statistics from a
quiet hour), and every claim of a burst then reads every scheduled run (migration 0025). A
statement that means to find runs by their status keeps ``=``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from jobs.guard.lease import (
    TAKE_OVER_IF_LAPSED_PG,
    HeldLease,
    LeaseHolder,
    held_from_row,
    lease_live_pg,
    run_lease_live_pg,
    statement_cursor,
)
from jobs.models import Job, RunStatus, Trigger, job_from_columns


@dataclass(frozen=True)
class NewRun:
    run_id: int
    job_id: int
    scheduled_for: datetime
    status: str = RunStatus.SCHEDULED  # skipped: a calendar's slot, recorded and not published


@dataclass(frozen=True)
class Claim:
    """A run this worker now owns (``status`` is ``running``), or found past its deadline
    (``missed``) or its lease held under overlap ``skip`` (``skipped``, ``error`` says by whom).

    ``job`` carries the columns the runner needs (others load on access); ``lease`` is set when
    the claim also took the run's lease."""

    run_id: int
    job_id: int
    scheduled_for: datetime
    attempt: int
    status: str
    job: Job
    error: str = ""
    lease: HeldLease | None = None
    trigger: str = Trigger.SCHEDULED
    upstream_run_id: int | None = None  # the upstream run whose success made this one
    has_downstreams: bool = False  # its finish may make runs of other jobs, to publish


@dataclass(frozen=True)
class AcquireAttempt:
    """One try to take the lease for a claimed run (``records.acquire_for_run``)."""

    late: bool  # the run's start deadline passed (database clock)
    lease: HeldLease | None  # taken now
    held_by: LeaseHolder | None  # otherwise: who holds it, if anyone


@dataclass(frozen=True)
class Finished:
    """What a finish recorded: the status (``None`` if the run was no longer ours, e.g.
    recovery recorded it lost first) and the retry it scheduled, if any."""

    status: str | None
    retry: NewRun | None = None


@dataclass(frozen=True)
class LostRun:
    run_id: int
    job_id: int
    retry: NewRun | None
    node: str = ""  # the worker that was running it
    error: str = ""  # why it was recorded lost


def deadline_from_pg(run: str) -> str:
    """SQL: the instant the start deadline of the run aliased ``run`` counts from: its slot; for a
    backfill run (a past slot) its release (jobs.workflow.backfill), NULL, so never late, until
    then; for an upstream's (its upstream's slot) its creation. The claim function
    (jobs/sql/claim_run.sql) repeats it."""
    return (
        f"CASE WHEN {run}.trigger = 'backfill' THEN {run}.released_at"
        f" WHEN {run}.trigger = 'upstream' THEN {run}.created_at"
        f" ELSE {run}.scheduled_for END"
    )


def blackout_of_pg(job_id: str, slot: str) -> str:
    """SQL: the name of the blackout window (a ``Blackout`` of that job or of every job) that
    covers ``slot`` of job ``job_id``, or NULL. Each statement that makes a slot's run asks it."""
    return f"""(SELECT b.name FROM jobs_blackout AS b
               WHERE (b.job_id IS NULL OR b.job_id = {job_id})
                 AND b.starts_at <= {slot} AND {slot} < b.ends_at
               ORDER BY b.starts_at, b.id LIMIT 1)"""


def skip_reason_pg(job_id: str, slot: str, reason: str) -> str:
    """SQL: why ``slot`` of job ``job_id`` is recorded skipped, "" when it runs: its blackout
    window (``'blackout: ' || name``), which wins, else ``reason``, its calendar's (the beat's
    ``jobs.schedule.calendars.verdict``, "" or NULL for none). Every statement that makes a
    slot's run, and the preview of slots (``jobs.beat.slot_fates``), asks it."""
    return f"coalesce('blackout: ' || {blackout_of_pg(job_id, slot)}, {reason}, '')"


def calendar_status_pg(why: str) -> str:
    """SQL: the status, finished_at and error columns of a slot's new run that the calendar
    skips when ``why`` (its reason, "" for none) says so."""
    return f"""CASE WHEN {why} = '' THEN 'scheduled' ELSE 'skipped' END,
       CASE WHEN {why} = '' THEN NULL ELSE now() END, {why}"""


# The job columns the runner needs, in the order _CLAIM returns them (after the run's columns).
_JOB_FIELDS = (
    "id", "name", "task", "args", "kwargs", "overlap", "start_deadline", "on_lost",
    "max_retries", "retry_backoff", "soft_time_limit", "time_limit", "lease_ttl", "min_hold",
    "queue", "priority", "max_concurrency",
)  # fmt: skip

# The claim moves scheduled → running exactly once (a row lock: a concurrent repeat waits, then
# finds the run no longer scheduled and gets no row). A claim after the start deadline (judged
# by the database clock) records missed instead, so a late worker never runs it late. In the
# same transaction it takes the job's lease (lease.TAKE_OVER_IF_LAPSED_PG) when the key is the
# job's own ('job:' || name, as Job.lock_key) — a key derived from arguments is computed in
# Python (acquire_for_run) — and records skipped, naming the holder, when the lease is held and
# the job's overlap policy is skip. It returns the job's columns (with a call's own arguments in
# place of the job's: jobs.calls), so the runner needs no other read. The function
# (jobs/sql/claim_run.sql) does only the branch a run takes, which costs the server less than
# one statement that builds every branch for every run.
_CLAIM = """
SELECT * FROM jobs_claim_run(%(run_id)s::bigint, %(node)s::text, %(pid)s::integer,
                             %(task_id)s::text, %(holder)s::text, %(keyed_tasks)s::text[])
"""

# The claim a delivery made, read back after a broken connection cut its reply: the run as that
# claim recorded it (its node, pid and task id), in _CLAIM's columns, with its lease only while
# that lease is live and held by the same holder; nothing when the claim never committed (the
# run is still scheduled, or someone else's) or its lease lapsed meanwhile (maintenance records
# the run lost). Not a hot path: a plain statement rather than a function.
_RECLAIMED_JOB_COLUMNS = ", ".join(
    f"coalesce(jr.{name}, j.{name})::text" if name in ("args", "kwargs") else f"j.{name}"
    for name in _JOB_FIELDS
)
_RECLAIM = f"""
SELECT jr.id, jr.scheduled_for, jr.attempt, jr.status, jr.error,
       CASE WHEN l.token IS NULL THEN NULL ELSE jr.lease_key END, l.token, l.expires_at,
       {_RECLAIMED_JOB_COLUMNS},
       jr.trigger, jr.upstream_run_id,
       EXISTS (SELECT 1 FROM jobs_job_upstreams AS d WHERE d.to_job_id = j.id)
  FROM jobs_jobrun AS jr JOIN jobs_job AS j ON j.id = jr.job_id
  LEFT JOIN jobs_lease AS l
         ON l.key = jr.lease_key AND l.token = jr.fencing_token AND l.holder = %(holder)s
        AND {lease_live_pg("l")}
 WHERE jr.id = %(run_id)s AND jr.node = %(node)s AND jr.pid = %(pid)s
   AND jr.task_id = %(task_id)s AND jr.status IN ('running', 'missed', 'skipped')
   AND (jr.fencing_token IS NULL OR l.token IS NOT NULL)
"""

# What a finish whose reply was cut recorded: the run's status once it is no longer running,
# while it still carries the finishing delivery's token (or none, for an unleased finish).
_RECORDED_STATUS = """
SELECT status FROM jobs_jobrun
 WHERE id = %(run_id)s AND status <> 'running'
   AND fencing_token IS NOT DISTINCT FROM %(token)s::bigint
"""

# A claimed run that never took its lease (overlap wait / replace, still waiting) goes back to
# scheduled when its worker shuts down, for another worker to run within its deadline. The
# dispatched_at stamp makes maintenance re-publish it only if the worker's own publish is lost.
_HAND_BACK = """
UPDATE jobs_jobrun
   SET status = 'scheduled', node = '', pid = NULL, task_id = '', started_at = NULL,
       dispatched_at = now()
 WHERE id = %(run_id)s AND status IS NOT DISTINCT FROM 'running' AND fencing_token IS NULL
RETURNING scheduled_for
"""

_COUNT_DUPLICATE = """
UPDATE jobs_jobrun SET duplicate_deliveries = duplicate_deliveries + 1
 WHERE id = %(run_id)s
RETURNING status
"""

# A later try at a claimed run's lease (a key derived from arguments; overlap wait / replace).
# Only a run still running and without a token may take it (FOR UPDATE: recovery cannot record
# it lost meanwhile), and the token is recorded on the run in the same statement.
_ACQUIRE_FOR_RUN = f"""
WITH run AS (
    SELECT r.id, now() > {deadline_from_pg("r")} + make_interval(secs => j.start_deadline) AS late
      FROM jobs_jobrun AS r JOIN jobs_job AS j ON j.id = r.job_id
     WHERE r.id = %(run_id)s AND r.status IS NOT DISTINCT FROM 'running' AND r.fencing_token IS NULL
       FOR UPDATE OF r
),
taken AS (
    INSERT INTO jobs_lease (key, holder, token, acquired_at, expires_at)
    SELECT %(key)s, %(holder)s, 1, now(), now() + make_interval(secs => %(ttl)s)
      FROM run WHERE NOT (run.late AND %(within_deadline)s)
    {TAKE_OVER_IF_LAPSED_PG}
    RETURNING token, expires_at
),
recorded AS (
    UPDATE jobs_jobrun AS r SET fencing_token = taken.token, lease_key = %(key)s
      FROM taken WHERE r.id = %(run_id)s
)
SELECT run.late, taken.token, taken.expires_at, l.holder, l.token
  FROM run LEFT JOIN taken ON true
  LEFT JOIN jobs_lease AS l ON l.key = %(key)s AND {lease_live_pg("l")}
"""

# The lease a try of _ACQUIRE_FOR_RUN took, read back after a broken connection cut its reply.
_LEASE_TAKEN_FOR_RUN = f"""
SELECT l.key, l.token, l.expires_at
  FROM jobs_jobrun AS r
  JOIN jobs_lease AS l ON l.key = r.lease_key AND l.token = r.fencing_token
 WHERE r.id = %(run_id)s AND r.status IS NOT DISTINCT FROM 'running'
   AND l.holder = %(holder)s AND {lease_live_pg("l")}
"""

# A retry is a new run of the same job: trigger 'retry', the next attempt, retry_of the run it
# repeats. After an exception, when the runner passes a delay (retries left, backoff with
# jitter from jobs.guard.policies). After a lost run, when the job says on_lost=retry, once: the
# re-run of a lost run is not re-run again. A call's arguments (jobs.calls) go with it. Follows a
# CTE named `finished`.
_RETRY_CTE = """
retry AS (
    INSERT INTO jobs_jobrun (job_id, scheduled_for, trigger, attempt, retry_of_id, args, kwargs)
    SELECT f.job_id, now() + make_interval(secs => coalesce(%(retry_delay)s::float8, 0)),
           'retry', f.attempt + 1, f.id, f.args, f.kwargs
      FROM finished AS f JOIN jobs_job AS j ON j.id = f.job_id
     WHERE (f.status = 'failed' AND %(retry_delay)s::float8 IS NOT NULL)
        OR (f.status = 'lost' AND j.on_lost = 'retry'
            AND NOT EXISTS (SELECT 1 FROM jobs_jobrun AS p
                             WHERE p.id = f.retry_of_id AND p.status = 'lost'))
    RETURNING id, job_id, scheduled_for, retry_of_id
)"""

# Guarantee 3: the outcome is written only by the holder of the run's token while its lease is
# live; a holder whose lease lapsed gets 'lost' recorded instead of its outcome. The same
# transaction gives the lease back (honouring min_hold, lease.RELEASE_EXPIRY_PG) and records a
# retry when one is due (as _RETRY_CTE), so a failure and its retry are recorded together or
# not at all. A function (jobs/sql/finish_run.sql), like the claim.
_FINISH_FENCED = """
SELECT * FROM jobs_finish_run(%(run_id)s::bigint, %(key)s::text, %(token)s::bigint,
                              %(status)s::text, %(error)s::text, %(traceback)s::text,
                              %(result)s::text, %(min_hold)s::float8, %(retry_delay)s::float8)
"""

# For outcomes decided without a lease (overlap allow, skipped while waiting, unknown function):
# no token to fence on, so never for a run that holds one.
_FINISH_UNLEASED = f"""
WITH finished AS (
    UPDATE jobs_jobrun
       SET status = %(status)s, finished_at = now(), error = %(error)s,
           traceback = %(traceback)s, result = %(result)s::jsonb
     WHERE id = %(run_id)s AND status IS NOT DISTINCT FROM 'running' AND fencing_token IS NULL
    RETURNING id, job_id, attempt, retry_of_id, status, args, kwargs
),
{_RETRY_CTE}
SELECT (SELECT status FROM finished), retry.id, retry.job_id, retry.scheduled_for
  FROM (SELECT 1) AS one LEFT JOIN retry ON true
"""

# Lost runs (jobs.upkeep.recovery): running, but the lease their token took is no longer live
# (expired or taken over), so their worker died, hung or lost the database; or still without a token
# well past the longest a live worker waits for one (overlap wait: the start deadline; replace: one
# ttl). One conditional statement, so concurrent callers record each run once, and on_lost=retry
# gets its retry in the same statement. Continuous tenures are the supervisor's
# (jobs.continuous.tenures), not retried here.
_AT = "coalesce(%(now)s::timestamptz, now())"
_MARK_LOST = f"""
WITH finished AS (
    UPDATE jobs_jobrun AS r
       SET status = 'lost', finished_at = {_AT},
           error = CASE WHEN r.fencing_token IS NULL
                        THEN format('took no lease within %%s s of its claim: its worker died '
                                    'while waiting for it', j.start_deadline + j.lease_ttl)
                        ELSE format('lease %%s (token %%s) lapsed while the run was running: '
                                    'its worker died, hung or lost the database',
                                    r.lease_key, r.fencing_token) END
                   || CASE WHEN j.time_limit IS NOT NULL
                                AND {_AT} >= r.started_at + make_interval(secs => j.time_limit)
                           THEN format(' (still running past its hard time limit of %%s s, so '
                                       'most likely killed by it)', j.time_limit)
                           ELSE '' END
      FROM jobs_job AS j
     WHERE r.status = 'running' AND j.id = r.job_id AND r.trigger <> 'continuous'
       AND CASE WHEN r.fencing_token IS NULL
                THEN j.overlap <> 'allow' AND {_AT} > r.started_at
                     + make_interval(secs => j.start_deadline + j.lease_ttl)
                ELSE NOT {run_lease_live_pg(_AT)} END
    RETURNING r.id, r.job_id, r.attempt, r.retry_of_id, r.status, r.node, r.error, r.args,
              r.kwargs
),
{_RETRY_CTE}
SELECT f.id, f.job_id, retry.id, retry.scheduled_for, f.node, f.error
  FROM finished AS f LEFT JOIN retry ON retry.retry_of_id = f.id
 ORDER BY f.id
"""


# A run that must not execute (its task is no registered job function where it was to be sent
# or received): failed without running, unless somebody claimed it meanwhile.
_FAIL_UNCLAIMED = """
UPDATE jobs_jobrun SET status = 'failed', node = %(node)s, finished_at = now(), error = %(error)s
 WHERE id = %(run_id)s AND status IS NOT DISTINCT FROM 'scheduled'
"""


# A run an operator cancelled before any worker claimed it (jobs.guard.revocation): never to
# start, so maintenance, which looks after scheduled runs only, neither re-publishes it nor
# records it missed; a claim that comes later finds it no longer scheduled. A continuous
# tenure is never scheduled.
_CANCEL_SCHEDULED = """
UPDATE jobs_jobrun SET status = 'cancelled', finished_at = now(), error = %(error)s
 WHERE id = %(run_id)s AND status IS NOT DISTINCT FROM 'scheduled'
"""


def cancel_scheduled(run_id: int, *, error: str) -> bool:
    """Record run ``run_id`` cancelled with ``error`` if no worker claimed it; whether it was."""
    with connection.cursor() as cursor:
        cursor.execute(_CANCEL_SCHEDULED, {"run_id": run_id, "error": error})
        return cursor.rowcount == 1


def fail_unclaimed(run_id: int, *, node: str, error: str) -> bool:
    """Record run ``run_id`` failed with ``error`` without running it; whether it was."""
    with connection.cursor() as cursor:
        cursor.execute(_FAIL_UNCLAIMED, {"run_id": run_id, "node": node, "error": error})
        return cursor.rowcount == 1


def claim(
    run_id: int,
    *,
    node: str,
    pid: int,
    task_id: str,
    holder: str | None = None,
    keyed_tasks: Collection[str] = (),
) -> Claim | None:
    """Take a scheduled run; ``None`` when it was already taken (a repeated delivery).

    With ``holder``, also take the job's lease as ``holder`` in the same statement, unless the
    job's function derives its lock key from its arguments (its name is in ``keyed_tasks``) or
    its overlap policy is ``allow``.
    """
    params: dict[str, Any] = {
        "run_id": run_id,
        "node": node,
        "pid": pid,
        "task_id": task_id,
        "holder": holder,
        "keyed_tasks": list(keyed_tasks),
    }
    sent_at = time.monotonic()
    with statement_cursor() as cursor:
        cursor.execute(_CLAIM, params)
        row = cursor.fetchone()
    return None if row is None else _claim_from_row(row, holder, sent_at)


def reclaim(
    run_id: int, *, node: str, pid: int, task_id: str, holder: str | None, claimed_at: float
) -> Claim | None:
    """The claim this delivery (``node``, ``pid``, ``task_id``) made of run ``run_id`` but whose
    reply a broken connection cut (``claimed_at``: when it was sent, monotonic); ``None`` when
    that claim never committed, or its lease is no longer live. Only for the delivery that sent
    the claim (jobs.guard.reconnect): another delivery of the same message in this process would
    look the same to the database."""
    params = {"run_id": run_id, "node": node, "pid": pid, "task_id": task_id, "holder": holder}
    with statement_cursor() as cursor:
        cursor.execute(_RECLAIM, params)
        row = cursor.fetchone()
    return None if row is None else _claim_from_row(row, holder, claimed_at)


def recorded_status(run_id: int, *, token: int | None) -> str | None:
    """The status recorded for run ``run_id`` once it ended, if it still carries ``token`` (the
    finish whose reply a broken connection cut went through); ``None`` while it runs."""
    with statement_cursor() as cursor:
        cursor.execute(_RECORDED_STATUS, {"run_id": run_id, "token": token})
        row = cursor.fetchone()
    return None if row is None else str(row[0])


def _claim_from_row(row: Sequence[Any], holder: str | None, sent_at: float) -> Claim:
    tail = 8 + len(_JOB_FIELDS)
    job = _job_from_columns(row[8:tail])
    held = None
    if row[6] is not None and holder is not None:
        held = held_from_row(row[5], holder, job.lease_ttl, row[6], row[7], sent_at)
    return Claim(
        run_id=row[0],
        job_id=job.pk,
        scheduled_for=row[1],
        attempt=row[2],
        status=row[3],
        error=row[4],
        job=job,
        lease=held,
        trigger=row[tail],
        upstream_run_id=row[tail + 1],
        has_downstreams=bool(row[tail + 2]),
    )


def _job_from_columns(values: Sequence[Any]) -> Job:
    """A ``Job`` instance from the claim's columns; the fields not selected load on access."""
    row = dict(zip(_JOB_FIELDS, values, strict=True))
    row["args"] = json.loads(row["args"])
    row["kwargs"] = json.loads(row["kwargs"])
    return job_from_columns(_JOB_FIELDS, [row[name] for name in _JOB_FIELDS])


def hand_back(run_id: int) -> datetime | None:
    """Return a claimed run that holds no lease to ``scheduled``; its slot, or ``None`` when it
    is no longer this worker's (recorded meanwhile, or it took a lease)."""
    with statement_cursor() as cursor:
        cursor.execute(_HAND_BACK, {"run_id": run_id})
        row = cursor.fetchone()
    return None if row is None else row[0]


def count_duplicate(run_id: int) -> str | None:
    """Record one more delivery of an already-claimed run; its current status, if it exists."""
    with connection.cursor() as cursor:
        cursor.execute(_COUNT_DUPLICATE, {"run_id": run_id})
        row = cursor.fetchone()
    return None if row is None else str(row[0])


def acquire_for_run(
    run_id: int, *, key: str, holder: str, ttl: float, within_deadline: bool
) -> AcquireAttempt | None:
    """Try once to take ``key`` for a claimed run and record the token on it.

    ``None`` when the run is no longer ours to run (recorded by someone else, or it already holds
    a token). With ``within_deadline``, a run past its start deadline does not take the lease.
    """
    params: dict[str, Any] = {
        "run_id": run_id,
        "key": key,
        "holder": holder,
        "ttl": ttl,
        "within_deadline": within_deadline,
    }
    sent_at = time.monotonic()
    with statement_cursor() as cursor:
        cursor.execute(_ACQUIRE_FOR_RUN, params)
        row = cursor.fetchone()
    if row is None:
        return None
    late, token, expires_at, holder_now, token_now = row
    if token is not None:
        return AcquireAttempt(
            late=late,
            lease=held_from_row(key, holder, ttl, token, expires_at, sent_at),
            held_by=None,
        )
    held_by = None if holder_now is None else LeaseHolder(holder=holder_now, token=token_now)
    return AcquireAttempt(late=late, lease=None, held_by=held_by)


def lease_taken_for_run(
    run_id: int, *, holder: str, ttl: float, sent_at: float
) -> HeldLease | None:
    """The live lease that ``holder``'s try at a lease for running run ``run_id`` (sent at
    ``sent_at``, monotonic) recorded, read back after a broken connection cut its reply; ``None``
    when that try took none. Only the delivery that claimed the run asks (so ``holder``, its
    node, pid and run, names it alone)."""
    with statement_cursor() as cursor:
        cursor.execute(_LEASE_TAKEN_FOR_RUN, {"run_id": run_id, "holder": holder})
        row = cursor.fetchone()
    return None if row is None else held_from_row(row[0], holder, ttl, row[1], row[2], sent_at)


def finish_fenced(
    run_id: int,
    *,
    key: str,
    token: int,
    status: RunStatus,
    error: str = "",
    traceback: str = "",
    result: str | None = None,
    min_hold: float = 0,
    retry_delay: float | None = None,
) -> Finished:
    """Write the outcome if ``token`` still holds ``key`` (else record ``lost``), give the lease
    back (kept until ``acquired_at + min_hold``), and record the retry that is due, if any
    (``retry_delay`` seconds from now after a failure; at once after a loss under
    ``on_lost=retry``). One statement."""
    params: dict[str, Any] = {
        "run_id": run_id,
        "key": key,
        "token": token,
        "status": status.value,
        "error": error,
        "traceback": traceback,
        "result": result,
        "min_hold": min_hold,
        "retry_delay": retry_delay,
    }
    return _finish(_FINISH_FENCED, params)


def finish_unleased(
    run_id: int,
    *,
    status: RunStatus,
    error: str = "",
    traceback: str = "",
    result: str | None = None,
    retry_delay: float | None = None,
) -> Finished:
    """Write the outcome of a run that holds no lease (and its retry, if one is due)."""
    params: dict[str, Any] = {
        "run_id": run_id,
        "status": status.value,
        "error": error,
        "traceback": traceback,
        "result": result,
        "retry_delay": retry_delay,
    }
    return _finish(_FINISH_UNLEASED, params)


def _finish(statement: str, params: dict[str, Any]) -> Finished:
    """Run one of the finish statements: each returns the status recorded and the retry made."""
    with statement_cursor() as cursor:
        cursor.execute(statement, params)
        row = cursor.fetchone()
    status, retry_id, job_id, retry_at = row[:4]
    retry = (
        None if retry_id is None else NewRun(run_id=retry_id, job_id=job_id, scheduled_for=retry_at)
    )
    return Finished(status=None if status is None else str(status), retry=retry)


def mark_lost_runs(now: datetime | None = None) -> list[LostRun]:
    """Record ``lost`` every running run whose worker can no longer be running it (see
    ``_MARK_LOST``), with the retries ``on_lost=retry`` asks for. ``now`` replaces the database
    clock (tests)."""
    with connection.cursor() as cursor:
        cursor.execute(_MARK_LOST, {"now": now, "retry_delay": None})
        rows = cursor.fetchall()
    return [
        LostRun(
            run_id=run_id,
            job_id=job_id,
            retry=None
            if retry_id is None
            else NewRun(run_id=retry_id, job_id=job_id, scheduled_for=retry_at),
            node=node or "",
            error=error,
        )
        for run_id, job_id, retry_id, retry_at, node, error in rows
    ]
