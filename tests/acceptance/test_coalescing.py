"""Back-pressure with real processes: two beats, and the only worker stopped (SIGSTOP) for
a minute under 1-second jobs. A coalescing job keeps one run waiting in the queue and records the
other slots skipped; the same job without coalescing piles up one queued run per slot. Every
slot still has exactly one record."""

from __future__ import annotations

import itertools
import math
import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from jobs.models import Job, JobRun, RunStatus
from jobs.schedule.kinds import Every
from tests.acceptance.conftest import Cluster, wait_for
from tests.support.job_factory import new_job

pytestmark = pytest.mark.acceptance

STOPPED_FOR = 60  # the minute: one queued run per job, not sixty
# Maintenance looks for stranded runs every half second and after 2 s: it must tell a queue that
# still holds its messages (the worker is only stopped) from one that lost them.
MAINTENANCE_INTERVAL = 0.5
BEATS = ("beat-1", "beat-2")
BEAT_ENV = {"JOBS_MAINTENANCE_INTERVAL": str(MAINTENANCE_INTERVAL), "JOBS_REPUBLISH_AFTER": "2"}
# The messages one worker holds unclaimed at any instant: its prefetch (concurrency 1 times
# CELERY_WORKER_PREFETCH_MULTIPLIER 1; with acks_late, the message it runs counts too).
PREFETCH = 1
# Long enough that the queued runs are not recorded missed before the worker is back.
QUEUED_LONG = 120


def most_copies(drained_in: float) -> int:
    """What the design lets maintenance re-publish needlessly: a message on its way, or taken
    and claimed while a pass reads, is never counted missing (jobs.upkeep.maintenance
    ._take_short); one a worker holds unclaimed is, and gets a copy. While the worker is
    stopped that is the message its main process holds, copied once (the copy then stands in
    for it in the queue). While it drains, every pass may find one more in its hands: at most
    PREFETCH per pass, each beat running a pass every interval. Copying every stranded run
    instead made 51 copies in a 15-second stop."""
    passes_while_draining = len(BEATS) * (math.ceil(drained_in / MAINTENANCE_INTERVAL) + 1)
    return PREFETCH * (1 + passes_while_draining)


def _queued(job: Job) -> int:
    return JobRun.objects.filter(job=job, status=RunStatus.SCHEDULED).count()


def test_a_coalescing_job_keeps_one_run_queued_while_its_workers_are_stopped(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "executions.log"
    worker = cluster.start_worker("worker", concurrency=1)
    for name in BEATS:
        cluster.start_beat(name, env=BEAT_ENV)
    coalescing = new_job(
        "coalescing", schedule=Every(1), log=log, queue=cluster.queue, coalesce=True,
        start_deadline=QUEUED_LONG,
    )  # fmt: skip
    piling = new_job(
        "piling", schedule=Every(1), log=log, queue=cluster.queue, coalesce=False,
        start_deadline=QUEUED_LONG,
    )  # fmt: skip
    wait_for(
        lambda: JobRun.objects.filter(status=RunStatus.SUCCEEDED).count() >= 4,
        timeout=90,
        what="both jobs running",
    )

    worker.send_signal(signal.SIGSTOP)  # the main process: it takes no more messages
    stopped_at = timezone.now()
    try:
        deadline = time.monotonic() + STOPPED_FOR
        while time.monotonic() < deadline:
            assert _queued(coalescing) <= 2, "runs piled up for the coalescing job"
            time.sleep(0.5)
        skipped = JobRun.objects.filter(
            job=coalescing, status=RunStatus.SKIPPED, error__startswith="coalesced: run "
        )
        assert skipped.count() >= STOPPED_FOR - 5
        assert _queued(piling) >= STOPPED_FOR - 5, "the other job piles up, one per slot"
    finally:
        worker.send_signal(signal.SIGCONT)
        continued_at = time.monotonic()

    wait_for(lambda: _queued(piling) <= 1, timeout=60, what="the piled-up runs drained")
    drained_in = time.monotonic() - continued_at
    copies = sum(
        JobRun.objects.filter(scheduled_for__gte=stopped_at).values_list(
            "duplicate_deliveries", flat=True
        )
    )
    assert copies <= most_copies(drained_in), (
        f"maintenance re-published {copies} runs still in the queue "
        f"(drained in {drained_in:.1f} s: at most {most_copies(drained_in)})"
    )
    for job in (coalescing, piling):
        slots = list(
            JobRun.objects.filter(job=job, scheduled_for__gte=stopped_at - timedelta(seconds=1))
            .order_by("scheduled_for")
            .values_list("scheduled_for", flat=True)
        )
        assert len(slots) == len(set(slots)), f"{job.name}: a slot has two records"
        gaps = {b - a for a, b in itertools.pairwise(slots)}
        assert gaps <= {timedelta(seconds=1)}, f"{job.name}: a slot has no record"
