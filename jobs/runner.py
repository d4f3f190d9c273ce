"""What a worker does with one run message: claim, lease, call, fenced finish, release."""

from __future__ import annotations

import json
import logging
import os
import time
import traceback
from dataclasses import dataclass
from typing import Any

from jobs import lease, records, registry
from jobs.context import JobContext
from jobs.exceptions import UnknownJobFunction
from jobs.keeper import LeaseKeeper
from jobs.lease import HeldLease
from jobs.models import Job, Lease, Overlap, RunStatus

log = logging.getLogger(__name__)

# How often a run under overlap policy `wait` retries the lease.
WAIT_POLL_SECONDS = 0.5


@dataclass(frozen=True)
class Outcome:
    status: RunStatus
    error: str = ""
    traceback: str = ""
    result: str | None = None


def execute_run(run_id: int, *, task_id: str, node: str) -> None:
    """Execute run ``run_id`` on this node, at most once however often its message arrives."""
    fields = {"run_id": run_id, "node": node}
    claim = records.claim(run_id, node=node, pid=os.getpid(), task_id=task_id)
    if claim is None:
        status = records.count_duplicate(run_id)
        log.warning(
            "duplicate delivery ignored (run is %s)",
            status or "gone",
            extra={**fields, "action": "duplicate_delivery"},
        )
        return
    if claim.status == RunStatus.MISSED:
        log.warning("run missed its start deadline", extra={**fields, "action": "missed"})
        return

    job = Job.objects.get(pk=claim.job_id)
    fields["job"] = job.name
    try:
        spec = registry.get(job.task)
    except UnknownJobFunction as exc:
        records.finish_unleased(run_id, status=RunStatus.FAILED, error=str(exc))
        log.error("unknown job function", extra={**fields, "action": "failed"})
        return

    key = lock_key_for(job, spec)
    if job.overlap == Overlap.ALLOW:
        outcome = _call(spec, job, _context(job, claim.run_id, claim, None, key))
        records.finish_unleased(
            run_id, status=outcome.status, error=outcome.error, traceback=outcome.traceback
        )
        log.info("run finished: %s", outcome.status, extra={**fields, "action": "finished"})
        return

    holder = f"{node}:{os.getpid()}:run-{run_id}"
    held = _acquire_for_policy(job, key, holder, claim.scheduled_for.timestamp())
    if held is None:
        current = Lease.objects.filter(key=key).first()
        who = f"{current.holder} (token {current.token})" if current else "another run"
        records.finish_unleased(
            run_id, status=RunStatus.SKIPPED, error=f"lease {key!r} held by {who}"
        )
        log.info("run skipped: lease held", extra={**fields, "action": "skipped", "key": key})
        return

    records.record_token(run_id, key=key, token=held.token)
    ctx = _context(job, run_id, claim, held.token, key)
    keeper = LeaseKeeper(held, ctx.stopping)
    keeper.start()
    try:
        outcome = _call(spec, job, ctx)
    finally:
        keeper.stop()
    if keeper.lost and outcome.status == RunStatus.SUCCEEDED:
        outcome = Outcome(RunStatus.LOST, error="the lease was lost while the job ran")
    recorded = records.finish_fenced(
        run_id,
        key=key,
        token=held.token,
        status=outcome.status,
        error=outcome.error,
        traceback=outcome.traceback,
        result=outcome.result,
    )
    lease.release(keeper.current)
    log.info(
        "run finished: %s",
        recorded or "already recorded by maintenance",
        extra={**fields, "action": "finished", "token": held.token, "key": key},
    )


def lock_key_for(job: Job, spec: registry.JobSpec) -> str:
    """The job's own key, or the one its declaration derives from its arguments."""
    if spec.lock_key is None:
        return job.lock_key
    if callable(spec.lock_key):
        return str(spec.lock_key(*job.args, **job.kwargs))
    return spec.lock_key.format(*job.args, **job.kwargs)


def _acquire_for_policy(job: Job, key: str, holder: str, scheduled_ts: float) -> HeldLease | None:
    held = lease.acquire(key, holder, job.lease_ttl)
    if held is not None or job.overlap == Overlap.SKIP:
        return held
    if job.overlap == Overlap.REPLACE:
        # Revoking the holder's lease fences its writes and outcome at once, and its keeper sets
        # ctx.stopping at its next renewal (within ttl/3); until then both functions may run.
        lease.force_release(key)
        return lease.acquire(key, holder, job.lease_ttl)
    # Overlap.WAIT: keep trying until the start deadline (node clock; the claim already used
    # the database clock for the hard check).
    deadline = scheduled_ts + job.start_deadline
    while held is None and time.time() < deadline:
        time.sleep(WAIT_POLL_SECONDS)
        held = lease.acquire(key, holder, job.lease_ttl)
    return held


def _context(
    job: Job, run_id: int, claim: records.Claim, token: int | None, key: str
) -> JobContext:
    return JobContext(
        job_name=job.name,
        run_id=run_id,
        scheduled_for=claim.scheduled_for,
        fencing_token=token,
        attempt=claim.attempt,
        lease_key=key,
    )


def _call(spec: registry.JobSpec, job: Job, ctx: JobContext) -> Outcome:
    try:
        value: Any = spec.func(ctx, *job.args, **job.kwargs)
    except Exception as exc:
        return Outcome(
            RunStatus.FAILED,
            error=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(),
        )
    return Outcome(RunStatus.SUCCEEDED, result=_as_json(value))


def _as_json(value: Any) -> str | None:
    if value is None:
        return None
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return json.dumps(repr(value))
