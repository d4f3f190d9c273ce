"""Detecting lost runs: runs recorded ``running`` whose worker can no longer be running them.

A run holds its lease while it runs and renews it every ttl/3, so a ``running`` run whose lease
(by ``lease_key`` and ``fencing_token``) is no longer live — expired, or taken over by a higher
token — has a worker that died, hung or was cut off from the database. Its outcome is fenced
already (a late finish records nothing over it); this records it ``lost``, tells Flower (a
``task-failed`` event on the dead worker's behalf, ``jobs.upkeep.task_events``) and, for
``on_lost=retry`` jobs, creates and publishes its one retry, which takes a higher token when it
acquires. Maintenance calls :func:`recover_lost_runs` periodically.

Runs under overlap ``allow`` hold no lease, so their loss is not visible here; node liveness is.
"""

from __future__ import annotations

import logging
from datetime import datetime

from jobs.broker.dispatch import publish_retry
from jobs.guard import run_records
from jobs.models import Job
from jobs.upkeep.task_events import announce_lost

log = logging.getLogger(__name__)


def recover_lost_runs(now: datetime | None = None) -> list[int]:
    """Record ``lost`` every running run whose lease lapsed or moved on; publish the retries
    that ``on_lost=retry`` asks for. Returns the ids of the runs recorded lost (each once, however
    many callers run this at the same time). ``now`` replaces the database clock (tests)."""
    lost = run_records.mark_lost_runs(now)
    retries = [run.retry for run in lost if run.retry is not None]
    jobs = Job.objects.in_bulk({retry.job_id for retry in retries})
    for run in lost:
        log.warning(
            "run recorded lost: its lease lapsed while it was running",
            extra={
                "action": "lost",
                "run_id": run.run_id,
                "job_id": run.job_id,
                "retry_run_id": None if run.retry is None else run.retry.run_id,
            },
        )
    announce_lost(lost)
    for retry in retries:
        publish_retry(jobs[retry.job_id], retry)
    return [run.run_id for run in lost]
