"""Per-job policies the runner applies: what a run does when its lease is held (overlap), and
how long a failed run waits before its retry.

More in docs/architecture.md, "Module notes".
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass

from jobs.broker import messages
from jobs.guard import lease, reconnect, run_records, shutdown_notice
from jobs.guard.lease import HeldLease, LeaseHolder
from jobs.models import Job, Overlap

log = logging.getLogger(__name__)

# How often a run under overlap wait / replace tries the lease again.
WAIT_POLL_SECONDS = 0.5
# The longest delay before a retry, however many attempts failed before.
MAX_RETRY_DELAY_SECONDS = 3600.0


@dataclass(frozen=True)
class Skip:
    """The run will not execute; ``reason`` is recorded with status ``skipped``."""

    reason: str


@dataclass(frozen=True)
class HandedBack:
    """The worker is shutting down: the run is ``scheduled`` again, for another worker."""

    reason: str


def retry_delay(base: float, attempt: int, rng: random.Random | None = None) -> float:
    """Seconds before retrying a run whose attempt number ``attempt`` (1 for the first) failed.

    Exponential: ``base`` doubled for each earlier attempt, capped at an hour; with "equal
    jitter" (half of it fixed, half random), so the retries of many runs that failed together
    (a database blip) spread out instead of failing together again.
    """
    delay = min(base * 2 ** (attempt - 1), MAX_RETRY_DELAY_SECONDS)
    return delay / 2 + (rng or random).uniform(0, delay / 2)


def take_lease(
    job: Job, run_id: int, key: str, holder: str
) -> HeldLease | Skip | HandedBack | None:
    """The lease on ``key`` for claimed run ``run_id``, as the job's overlap policy allows.

    ``None`` when the run is no longer this worker's to run (recovery recorded it meanwhile).
    """
    if job.overlap == Overlap.REPLACE:
        # One holder to replace: max_concurrency above 1 needs skip or wait (Job.clean); a row
        # written around that still never has more holders than leases.
        return _replace(job, run_id, lease.slot_keys(key, job.max_concurrency)[0], holder)
    attempt = _try_each_lease(job, run_id, key, holder, within_deadline=False)
    if attempt is None:
        return None
    if attempt.lease is not None:
        return attempt.lease
    if job.overlap == Overlap.WAIT:
        return _wait(job, run_id, key, holder)
    return Skip(held_message(key, attempt.held_by, job.max_concurrency))


def _try_each_lease(
    job: Job, run_id: int, key: str, holder: str, *, within_deadline: bool
) -> run_records.AcquireAttempt | None:
    """One try at each of the key's leases (``job.max_concurrency`` of them, in order): the
    first taken, else the last try's answer (``None``: the run is no longer this worker's)."""
    attempt = None
    for slot_key in lease.slot_keys(key, job.max_concurrency):
        attempt = _acquire_for_run(
            run_id, key=slot_key, holder=holder, ttl=job.lease_ttl, within_deadline=within_deadline
        )
        if attempt is None or attempt.lease is not None or (attempt.late and within_deadline):
            return attempt
    return attempt


def _acquire_for_run(
    run_id: int, *, key: str, holder: str, ttl: float, within_deadline: bool
) -> run_records.AcquireAttempt | None:
    """``run_records.acquire_for_run``; when the connection breaks under it, the lease it took
    (read back) or a new try (jobs.guard.reconnect)."""
    sent_at = time.monotonic()

    def acquire() -> run_records.AcquireAttempt | None:
        return run_records.acquire_for_run(
            run_id, key=key, holder=holder, ttl=ttl, within_deadline=within_deadline
        )

    def read_back_or_acquire() -> run_records.AcquireAttempt | None:
        taken = run_records.lease_taken_for_run(run_id, holder=holder, ttl=ttl, sent_at=sent_at)
        if taken is None:
            return acquire()
        held = reconnect.refreshed(taken)
        return None if held is None else run_records.AcquireAttempt(False, held, None)

    return reconnect.surviving_disconnect(
        acquire, read_back_or_acquire, what="lease", run_id=run_id
    )


def held_message(key: str, held_by: LeaseHolder | None, slots: int = 1) -> str:
    if slots > 1:
        return f"all {slots} leases of {key} held (max_concurrency {slots})"
    if held_by is None:
        return f"lease {key} was held by another run"
    return f"lease {key} held by {held_by.holder} (token {held_by.token})"


def _wait(job: Job, run_id: int, key: str, holder: str) -> HeldLease | Skip | HandedBack | None:
    while True:
        if shutdown_notice.shutting_down.wait(WAIT_POLL_SECONDS):
            return _hand_back(job, run_id, f"waiting for lease {key}")
        attempt = _try_each_lease(job, run_id, key, holder, within_deadline=True)
        if attempt is None or attempt.lease is not None:
            return None if attempt is None else attempt.lease
        if attempt.late:
            held = held_message(key, attempt.held_by, job.max_concurrency)
            return Skip(f"{held} until the start deadline ({job.start_deadline} s)")


def _replace(job: Job, run_id: int, key: str, holder: str) -> HeldLease | Skip | HandedBack | None:
    asked = lease.request_stop(key, holder)
    if asked is not None:
        log.info(
            "asked %s to stop",
            asked.holder,
            extra={"action": "replace_requested", "key": key, "token": asked.token},
        )
    # A holder that heeds the request gives the lease back within ttl/3 plus its own finish;
    # one that is dead or paused loses it within one ttl. Only one that ignores it outlasts this.
    give_up_waiting_at = time.monotonic() + job.lease_ttl + WAIT_POLL_SECONDS
    while True:
        attempt = _acquire_for_run(
            run_id, key=key, holder=holder, ttl=job.lease_ttl, within_deadline=False
        )
        if attempt is None or attempt.lease is not None:
            return None if attempt is None else attempt.lease
        current = attempt.held_by
        if current is not None and (asked is None or current.token != asked.token):
            return Skip(
                f"superseded: {held_message(key, current)} took over while this run waited "
                "to replace the previous holder"
            )
        if current is not None and time.monotonic() >= give_up_waiting_at:
            log.warning(
                "holder %s ignored the stop request for a ttl: revoking its lease",
                current.holder,
                extra={"action": "replace_forced", "key": key, "token": current.token},
            )
            lease.force_release(key, token=current.token)
            continue
        if shutdown_notice.shutting_down.wait(WAIT_POLL_SECONDS):
            return _hand_back(job, run_id, f"waiting to replace the holder of lease {key}")


def _hand_back(job: Job, run_id: int, waiting: str) -> HandedBack | None:
    slot = run_records.hand_back(run_id)
    if slot is None:
        return None  # recorded meanwhile: no longer this worker's
    reason = f"the worker is shutting down; the run was {waiting}"
    try:
        messages.publish(job, run_id, slot)
    except Exception:  # the broker is gone too: maintenance re-publishes it
        log.exception(
            "publishing a handed-back run failed; maintenance will re-publish it",
            extra={"action": "publish_failed", "run_id": run_id, "job": job.name},
        )
    return HandedBack(reason)
