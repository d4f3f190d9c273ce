"""What a worker does with one run message: claim (and lease), call, fenced finish (and release).

A guarded run costs two statements: ``records.claim`` moves the run to ``running`` and takes its
lease, ``records.finish_fenced`` writes the outcome only if the lease still holds, gives it back
and records the retry that is due. Overlap policies other than the claim's own skip are in
``jobs.guard.policies``; the heartbeat, stop requests and the soft time limit in
``jobs.guard.lease_keeper``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import traceback
from dataclasses import dataclass, replace
from typing import Any

import billiard.common
from celery.exceptions import WorkerShutdown, WorkerTerminate
from django.db import DatabaseError, close_old_connections, connection

from jobs import observers, registry
from jobs.broker import dispatch, messages
from jobs.context import JobContext
from jobs.exceptions import BadLockKey, UnknownJobFunction
from jobs.guard import (
    after_finish,
    lease,
    policies,
    reconnect,
    run_records,
    shutdown_notice,
    token_watch,
)
from jobs.guard.delivery import Delivery
from jobs.guard.lease import HeldLease
from jobs.guard.lease_keeper import LeaseKeeper
from jobs.models import Job, Overlap, RunStatus
from jobs.process import logcontext
from jobs.runlog import capture
from jobs.values import jsonvalues

log = logging.getLogger(__name__)

# Maintenance records lost a running run whose worker it believes dead (jobs.upkeep.recovery).
RECORDED_LOST_MEANWHILE = "recorded lost by maintenance before this worker finished it"
# A connection used by a run less than this ago is known to work (see _recycle_connection).
HEALTH_CHECK_AFTER_IDLE_SECONDS = 1.0
_last_used = float("-inf")


@dataclass(frozen=True)
class Outcome:
    status: RunStatus
    error: str = ""
    traceback: str = ""
    result: str | None = None
    # Whether a retry may follow (the function raised; not a time limit, stop or loss).
    retryable: bool = False
    # What the function raised, reported to Celery as the cause of its failure.
    exception: BaseException | None = None


@logcontext.bound_run
def execute_run(run_id: int, *, task_id: str, node: str) -> Delivery:
    """Execute run ``run_id`` on this node, at most once however often its message arrives;
    returns what this delivery did (recorded before it returns)."""
    _recycle_connection()
    holder = f"{node}:{os.getpid()}:run-{run_id}"
    with reconnect.delivering(run_id) as alone:
        return _execute(run_id, task_id=task_id, node=node, holder=holder, may_reclaim=alone)


def execute_eagerly(run_id: int, *, task_id: str) -> Delivery:
    """``execute_run`` here and now, in the caller's process (``task_always_eager``). A
    ``KeyboardInterrupt`` is recorded failed as on a worker, then raised again: here it may be
    the user's Ctrl-C, and it must still stop the program (as Django's ImmediateBackend does)."""
    delivery = execute_run(run_id, task_id=task_id, node="eager")
    if isinstance(delivery.cause, KeyboardInterrupt):
        raise delivery.cause
    return delivery


def _execute(run_id: int, *, task_id: str, node: str, holder: str, may_reclaim: bool) -> Delivery:
    fields: dict[str, Any] = {"run_id": run_id, "node": node}
    claim = _claim(run_id, task_id=task_id, node=node, holder=holder, may_reclaim=may_reclaim)
    if claim is None:
        status = _count_duplicate(run_id)
        log.warning(
            "duplicate delivery ignored (run is %s)",
            status or "gone",
            extra={**fields, "action": "duplicate_delivery"},
        )
        return Delivery(run_id, status or "gone", duplicate=True)
    job = claim.job
    fields["job"] = job.name
    logcontext.bind(job=job.name, slot=claim.scheduled_for, token=_token(claim.lease))
    observers.name_run(job.name, job.task)
    if claim.status == RunStatus.MISSED:
        log.warning("run missed its start deadline", extra={**fields, "action": "missed"})
        after_finish.run_ended(claim)
        return Delivery(run_id, claim.status, reason=claim.error)
    if claim.status == RunStatus.SKIPPED:
        log.info("run skipped: %s", claim.error, extra={**fields, "action": "skipped"})
        after_finish.run_ended(claim)
        return Delivery(run_id, claim.status, reason=claim.error)
    # A database that went back (its token lower than one this process held) runs nothing.
    if claim.lease is not None:
        token_watch.observe(claim.lease.key, claim.lease.token)
    refused = token_watch.halted()
    if refused is not None:
        return _finish(job, claim, claim.lease, _refusal(refused), fields)

    try:
        spec = registry.get(job.task)
        key = lock_key_for(job, spec, run_id=run_id)
    except (UnknownJobFunction, BadLockKey) as exc:  # e.g. a row written around validation
        error = str(exc) if isinstance(exc, UnknownJobFunction) else f"lock key {exc}"
        return _finish(job, claim, claim.lease, Outcome(RunStatus.FAILED, error=error), fields)

    if job.overlap == Overlap.ALLOW:
        ctx = _context(job, claim, None, key)
        outcome = _call_with_soft_limit(spec, job, ctx)
        return _finish(job, claim, None, outcome, fields)

    held = claim.lease
    if held is None:
        taken = policies.take_lease(job, run_id, key, holder)
        if taken is None:
            log.warning(
                "run recorded elsewhere while it waited for its lease",
                extra={**fields, "action": "abandoned"},
            )
            return Delivery(run_id, RunStatus.LOST, reason=RECORDED_LOST_MEANWHILE)
        if isinstance(taken, policies.Skip):
            skip = Outcome(RunStatus.SKIPPED, error=taken.reason)
            return _finish(job, claim, None, skip, fields)
        if isinstance(taken, policies.HandedBack):
            log.info("run handed back: %s", taken.reason, extra={**fields, "action": "handed_back"})
            return Delivery(run_id, RunStatus.SCHEDULED, reason=f"handed back: {taken.reason}")
        held = taken
        logcontext.bind(token=held.token)
        refused = token_watch.observe(held.key, held.token)
        if refused is not None:
            return _finish(job, claim, held, _refusal(refused), fields)

    ctx = _context(job, claim, held.token, held.key)
    keeper = LeaseKeeper(held, ctx.stopping, soft_time_limit=job.soft_time_limit)
    keeper.start()
    try:
        outcome = _call(spec, job, ctx)
    finally:
        keeper.stop()
    return _finish(job, claim, keeper.current, _settle(outcome, job, keeper), fields)


def _claim(
    run_id: int, *, task_id: str, node: str, holder: str, may_reclaim: bool
) -> run_records.Claim | None:
    """``run_records.claim``; when the connection breaks under it, the claim it made (read
    back) or a new one (jobs.guard.reconnect)."""
    pid, sent_at = os.getpid(), time.monotonic()

    def claim() -> run_records.Claim | None:
        return run_records.claim(
            run_id,
            node=node,
            pid=pid,
            task_id=task_id,
            holder=holder,
            keyed_tasks=registry.keyed_names(),
        )

    def read_back_or_claim() -> run_records.Claim | None:
        if may_reclaim:
            made = run_records.reclaim(
                run_id, node=node, pid=pid, task_id=task_id, holder=holder, claimed_at=sent_at
            )
            if made is not None:
                log.info("the cut claim had gone through", extra={"action": "reclaimed"})
                return _with_refreshed_lease(made)
        return claim()

    return reconnect.surviving_disconnect(claim, read_back_or_claim, what="claim", run_id=run_id)


def _count_duplicate(run_id: int) -> str | None:
    """``run_records.count_duplicate``; the count is only a statistic: a connection broken under
    it must not turn the duplicate's task (which shares the run's task id) into a failure."""
    try:
        return run_records.count_duplicate(run_id)
    except reconnect.CONNECTION_ERRORS as exc:
        log.warning(
            "could not count a duplicate delivery: %s",
            exc,
            extra={"action": "duplicate_not_counted", "run_id": run_id},
        )
        return "not known (the database could not be reached)"


def _with_refreshed_lease(claim: run_records.Claim) -> run_records.Claim | None:
    if claim.lease is None:
        return claim
    held = reconnect.refreshed(claim.lease)
    if held is None:
        log.warning(
            "the cut claim's lease lapsed before the worker got back: not running it (recorded "
            "lost by maintenance)",
            extra={"action": "reclaimed_too_late"},
        )
        return None
    return replace(claim, lease=held)


def refuse_unknown_task(
    sender: Any = None, name: str = "", id: str | None = None, **_kwargs: Any
) -> None:
    """Celery's ``task_unknown``: a run's message names a task this worker does not have (its
    row was written around validation, or the code is not deployed here). Celery drops such a
    message; the run is recorded failed, never executed, instead of waiting to be missed."""
    run_id = messages.run_id_of(id)
    if run_id is None:
        return
    node = str(getattr(sender, "hostname", "") or "")
    error = f"task {name!r} is not registered on worker {node}: the run was not executed"
    try:
        recorded = run_records.fail_unclaimed(run_id, node=node, error=error)
    except DatabaseError:
        log.exception("could not record the run failed", extra={"run_id": run_id})
        close_old_connections()
        return
    log.error(
        error,
        extra={"action": "unknown_task", "run_id": run_id, "recorded": recorded, "node": node},
    )


def _recycle_connection() -> None:
    """Workers keep their connection across tasks (``CELERY_DB_REUSE_MAX``). Like Django at
    each request, replace one that is too old or broke (a database restart) before a run uses
    it, and check its health (a round trip) when it sat idle; a burst of runs skips the check
    while the connection is seen working, as long as no error occurred on it."""
    global _last_used
    now = time.monotonic()
    idle = now - _last_used
    _last_used = now
    if connection.in_atomic_block:
        return
    if connection.errors_occurred or idle > HEALTH_CHECK_AFTER_IDLE_SECONDS:
        close_old_connections()


def _token(held: HeldLease | None) -> int | None:
    return None if held is None else held.token


def lock_key_for(job: Job, spec: registry.JobSpec, run_id: int | None = None) -> str:
    """The job's own key, or the one its declaration derives from its arguments (``BadLockKey``
    when it cannot, or derives one the lease table cannot hold); for run ``run_id`` of a job
    whose runs each take their own lease (``JobSpec.lease_per_run``), that run's key."""
    if spec.lock_key is None:
        if run_id is not None and spec.lease_per_run(job.name):
            return lease.run_key(job.lock_key, run_id)
        return job.lock_key
    return spec.derive_lock_key(job.args, job.kwargs)


def _refusal(reason: str) -> Outcome:
    return Outcome(RunStatus.FAILED, error=f"not run: {token_watch.ADVICE} ({reason})")


def _settle(outcome: Outcome, job: Job, keeper: LeaseKeeper) -> Outcome:
    """The outcome to record, given what happened to the lease while the function ran."""
    if keeper.lost:
        reason = f"the lease was lost while the job ran: {keeper.lost_reason}"
        return Outcome(RunStatus.LOST, error=_joined(reason, outcome.error))
    if keeper.stop_requested_by:
        reason = f"replaced: {keeper.stop_requested_by} asked this run to stop"
        return replace(
            outcome,
            status=RunStatus.CANCELLED,
            error=_joined(reason, outcome.error),
            retryable=False,
        )
    if keeper.soft_limit_reached:
        return _soft_limit_outcome(outcome, job)
    return outcome


def _soft_limit_outcome(outcome: Outcome, job: Job) -> Outcome:
    reason = f"soft time limit of {job.soft_time_limit} s reached: ctx.stopping was set"
    return replace(
        outcome, status=RunStatus.FAILED, error=_joined(reason, outcome.error), retryable=False
    )


def _joined(reason: str, error: str) -> str:
    return f"{reason}; the job's error: {error}" if error else reason


def _finish(
    job: Job,
    claim: run_records.Claim,
    held: HeldLease | None,
    outcome: Outcome,
    fields: dict[str, Any],
) -> Delivery:
    """Record ``outcome`` (fenced when ``held``), publish the retry that is due, and say what
    was recorded."""
    retry_delay = None
    if outcome.retryable and claim.attempt <= job.max_retries:
        retry_delay = policies.retry_delay(job.retry_backoff, claim.attempt)

    recorded: dict[str, Any] = {
        "status": outcome.status,
        "error": outcome.error,
        "traceback": outcome.traceback,
        "result": outcome.result,
        "retry_delay": retry_delay,
    }

    def finish() -> run_records.Finished:
        if held is None:
            return run_records.finish_unleased(claim.run_id, **recorded)
        return run_records.finish_fenced(
            claim.run_id, key=held.key, token=held.token, min_hold=job.min_hold, **recorded
        )

    def finish_or_read_back() -> run_records.Finished:
        # A cut finish that went through left the run ended under this token: what it recorded
        # is read back (a retry it made is published by maintenance, as for a crashed worker).
        finished = finish()
        if finished.status is not None:
            return finished
        token = None if held is None else held.token
        return run_records.Finished(run_records.recorded_status(claim.run_id, token=token))

    finished = reconnect.surviving_disconnect(
        finish, finish_or_read_back, what="finish", run_id=claim.run_id
    )
    if held is not None:
        fields = {**fields, "key": held.key, "token": held.token}
    log.info(
        "run finished: %s",
        finished.status or "already recorded by maintenance",
        extra={**fields, "action": "finished", "status": finished.status},
    )
    if finished.retry is not None:
        dispatch.publish_retry(job, finished.retry)
    after_finish.run_ended(claim)
    return _delivered(claim.run_id, outcome, finished.status)


def _delivered(run_id: int, outcome: Outcome, recorded: str | None) -> Delivery:
    if recorded is None:
        return Delivery(run_id, RunStatus.LOST, reason=RECORDED_LOST_MEANWHILE)
    if recorded != outcome.status:  # the fenced finish found the lease gone
        reason = (
            f"the lease lapsed before the run ended; its outcome ({outcome.status}) was discarded"
        )
        return Delivery(run_id, recorded, reason=_joined(reason, outcome.error))
    return Delivery(
        run_id, recorded, reason=outcome.error, result=outcome.result, cause=outcome.exception
    )


def _context(job: Job, claim: run_records.Claim, token: int | None, key: str) -> JobContext:
    return JobContext(
        job_name=job.name,
        run_id=claim.run_id,
        scheduled_for=claim.scheduled_for,
        fencing_token=token,
        attempt=claim.attempt,
        lease_key=key,
        upstream_run_id=claim.upstream_run_id,
    )


def _call_with_soft_limit(spec: registry.JobSpec, job: Job, ctx: JobContext) -> Outcome:
    """``_call`` for a run without a lease (so without a keeper to watch the soft limit)."""
    if job.soft_time_limit is None:
        return _call(spec, job, ctx)
    reached = threading.Event()

    def reach() -> None:
        reached.set()
        ctx.stopping.set()

    timer = threading.Timer(job.soft_time_limit, reach)
    timer.daemon = True
    timer.start()
    try:
        outcome = _call(spec, job, ctx)
    finally:
        timer.cancel()
    return _soft_limit_outcome(outcome, job) if reached.is_set() else outcome


def _call(spec: registry.JobSpec, job: Job, ctx: JobContext) -> Outcome:
    try:
        # The worker's shutdown sets ctx.stopping too; what the function then returns counts.
        # What it logs and prints is kept with the run, written before its outcome is.
        with shutdown_notice.watching(ctx.stopping), capture.capturing(ctx.run_id, spec.log_level):
            value: Any = spec.call(ctx, job.args, job.kwargs)
    except (WorkerShutdown, WorkerTerminate):
        # The worker's own end (a solo pool's hard shutdown raises it wherever the main thread
        # is): not the job's outcome. The process ends; the run is recorded lost.
        raise
    # Not Exception only: SystemExit (sys.exit()) and KeyboardInterrupt raised by the job's own
    # code are its failure, recorded now with the lease given back. Left to Celery they end the
    # pool process, and the run would wait for its lease to lapse to be recorded lost. A pool
    # process ignores SIGINT, so a KeyboardInterrupt there is always the code's own.
    except BaseException as exc:
        if _pool_process_ending():
            raise  # the SystemExit of its terminate signal: the run was stopped, not failed
        return Outcome(
            RunStatus.FAILED,
            error=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(),
            retryable=True,
            exception=exc,
        )
    return Outcome(RunStatus.SUCCEEDED, result=_as_json(value))


def _pool_process_ending() -> bool:
    """Has this pool process's own terminate handler fired? billiard's handler raises
    ``SystemExit`` wherever the code is (``revoke --terminate``, a hard time limit, the worker's
    shutdown): that exception is the process's end, which the revoke or the lease's lapse
    records, never the job's failure."""
    fired = getattr(billiard.common, "terminate_handler_fired", None)  # billiard 4.3+
    return bool(fired is not None and fired())


def _as_json(value: Any) -> str | None:
    """A job's return value as its run stores it: JSON, or the ``repr`` of a value JSON cannot
    hold, nor ``jsonb`` (``NaN``, a NUL character: the finish itself would fail, and the run be
    recorded lost). A Django task's value was already held to Django's rule (it fails the task)."""
    if value is None:
        return None
    try:
        text = json.dumps(value)
        jsonvalues.check_storable(json.loads(text))
    except (TypeError, ValueError, RecursionError):
        return json.dumps(repr(value))
    return text
