"""Maintenance: the housekeeping that keeps every slot moving to a visible terminal state.

More in docs/architecture.md, "Module notes".
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celery import current_app
from django.db import DatabaseError

from jobs.alerts import detect
from jobs.beat import changelog, retiring
from jobs.broker.dispatch import publish_many
from jobs.database.database_clock import database_now
from jobs.guard import lease, run_records
from jobs.models import Job
from jobs.process.background import PeriodicThread
from jobs.upkeep import queue_depth, sweeps
from jobs.upkeep.recovery import recover_lost_runs
from jobs.upkeep.retention import prune_if_due
from jobs.workflow import backfill

log = logging.getLogger(__name__)

LEASE_KEY = "maintenance"
# How often the dead-man's switch looks at every periodic job (seconds).
OVERDUE_CHECK_EVERY = 60.0
# Stranded runs re-published per pass; the rest wait for the next pass.
REPUBLISH_BATCH = 10_000


@dataclass(frozen=True)
class PassReport:
    expired: int  # scheduled runs recorded missed
    republished: int
    lost: int | None  # runs recorded lost by jobs.upkeep.recovery (None: not available)
    changes_pruned: int


def run_pass(
    *, holder: str, republish_after: float, lease_ttl: float = 60.0, producer: Any = None
) -> PassReport | None:
    """One maintenance pass if ``holder`` gets the maintenance lease; ``None`` if another
    holder has it (or had it less than its ttl ago and has not given it back)."""
    held = lease.acquire(LEASE_KEY, holder, lease_ttl)
    if held is None:
        return None
    try:
        retiring.pause_expired()
        expired = sweeps.expire_scheduled()
        if expired:
            log.warning(
                "%d run(s) not started within their start deadline (or before their job "
                "expired) recorded missed",
                len(expired),
                extra={"action": "missed", "run_ids": expired[:100]},
            )
        republished = _republish_stranded(republish_after, producer)
        # A backfill whose worker died between one run's end and the next one's release.
        republished += backfill.release_and_publish(producer=producer)
        report = PassReport(
            expired=len(expired),
            republished=republished,
            lost=len(recover_lost_runs()),
            changes_pruned=changelog.prune(),
        )
        prune_if_due()
        _detect_incidents()
    finally:
        lease.release(held)
    return report


def _republish_stranded(after: float, producer: Any) -> int:
    """Re-publish the stranded runs: every one whose message never went out, and of those whose
    message did, only as many as their queue is short of (``_take_short``). The first are out
    before the queues are read, so their messages are never counted missing."""
    never_sent = sweeps.take_stranded(after, REPUBLISH_BATCH, sent=False)
    republished = _republish(never_sent, producer) if never_sent else 0
    short = _take_short(after, REPUBLISH_BATCH - len(never_sent))
    return republished + (_republish(short, producer) if short else 0)


def _take_short(after: float, room: int) -> list[run_records.NewRun]:
    """The sent runs whose messages their queue no longer holds, up to ``room``. A queue that
    still holds every due run's message (workers stopped or busy) gets no copies; one that lost
    them all (a broker flush) gets them all. The shortfall is taken oldest first: a queue hands
    out its oldest messages first, so those are the ones a worker holds unclaimed or that were
    lost.

    The readings are ordered so that a message still on its way is never counted missing: the
    runs are counted (again) after the depths are read, only those whose message went out
    before the depths were read (dispatched_at is stamped once a publish is done), and only
    those still unclaimed (a run claimed meanwhile had left its queue). What is left counted
    missing is a lost message or one a worker holds and has not claimed yet (its prefetch)."""
    if room <= 0:
        return []
    read_at, backlogs = sweeps.sent_backlog(after)
    if not backlogs:
        return []
    with current_app.connection_for_write() as connection:
        depths = queue_depth.waiting_messages(connection, [b.queue for b in backlogs])
    _, backlogs = sweeps.sent_backlog(after, published_before=read_at)
    runs: list[run_records.NewRun] = []
    for backlog in backlogs:
        depth = depths.get(backlog.queue)
        short = backlog.stranded if depth is None else min(backlog.stranded, backlog.sent - depth)
        if short > 0 and room > len(runs):
            runs += sweeps.take_stranded(
                after, min(short, room - len(runs)), sent=True, queue=backlog.queue
            )
        elif short <= 0:
            log.info(
                "%d run(s) wait in queue %s longer than %g s, their messages still queued "
                "(%s): not re-published",
                backlog.stranded,
                backlog.queue,
                after,
                depth,
                extra={"action": "still_queued", "queue": backlog.queue},
            )
    return runs


def _republish(stranded: list[run_records.NewRun], producer: Any) -> int:
    jobs = Job.objects.in_bulk({run.job_id for run in stranded})
    runs = [
        (jobs[run.job_id], run.run_id, run.scheduled_for) for run in stranded if run.job_id in jobs
    ]
    with current_app.producer_or_acquire(producer) as acquired:
        sent = publish_many(runs, producer=acquired)
    log.warning(
        "re-published %d run(s) still scheduled long after their message went out",
        sent,
        extra={"action": "republished", "run_ids": [run.run_id for run in stranded][:100]},
    )
    return sent


_next_overdue_check = 0.0


def _detect_incidents() -> None:
    global _next_overdue_check
    try:
        detect.check_running_long()
        detect.check_too_short()
        detect.check_cluster()
        if time.monotonic() >= _next_overdue_check:
            _next_overdue_check = time.monotonic() + OVERDUE_CHECK_EVERY
            detect.check_overdue_jobs(database_now())
    except DatabaseError:
        raise
    except Exception:
        log.exception("incident detection failed", extra={"action": "incident_detection"})


def holder_name() -> str:
    return f"maintenance@{socket.gethostname()}:{os.getpid()}"


class MaintenanceLoop(PeriodicThread):
    """Tries a pass every ``interval`` seconds until stopped."""

    name = "jobs-maintenance"

    def __init__(
        self,
        interval: float,
        republish_after: float,
        run: Callable[..., PassReport | None] = run_pass,
    ) -> None:
        super().__init__(interval)
        self.republish_after = republish_after
        self._run = run
        self._app: Any = None
        self._holder = ""
        # The lease lasts several passes, so a slow pass keeps it; a dead holder's lapses soon.
        self._ttl = max(30.0, 6 * interval)

    def start(self, app: Any = None) -> None:
        """Start the thread; ``app`` is the Celery app to publish with (thread-local in Celery)."""
        self._app = app
        super().start()

    def prepare(self) -> None:
        self._holder = holder_name()  # in the process that runs the thread
        if self._app is not None:
            self._app.set_current()

    def step(self) -> None:
        report = self._run(
            holder=self._holder, republish_after=self.republish_after, lease_ttl=self._ttl
        )
        if report is not None and (report.expired or report.republished or report.lost):
            log.info(
                "maintenance: %d missed, %d re-published, %s lost",
                report.expired,
                report.republished,
                report.lost,
                extra={"action": "maintenance"},
            )
