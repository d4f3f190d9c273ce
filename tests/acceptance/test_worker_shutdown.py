"""A worker asked to stop (SIGTERM to its main process: ``docker stop``, systemd's
``KillMode=mixed``) sets ``ctx.stopping`` in the runs it is executing, whatever its pool, so a
long job ends early and is recorded with its own outcome instead of holding the shutdown up."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from django.utils import timezone

from jobs.guard import lease
from jobs.models import JobRun, RunStatus
from tests.acceptance.conftest import Cluster, wait_for

pytestmark = pytest.mark.acceptance

JOB_SECONDS = 120  # how long the job waits for ctx.stopping before giving up by itself


# prefork: runs execute in pool processes (told through the pipe); solo and threads: in the
# worker's main process itself (told directly).
@pytest.mark.parametrize("pool", ["prefork", "solo", "threads"])
def test_a_warm_shutdown_asks_the_runs_under_way_to_stop(cluster: Cluster, pool: str) -> None:
    added = cluster.manage(
        "jobs", "add", "long", "--task", "tests.wait_for_stop", "--every", "1h",
        "--kwargs", json.dumps({"seconds": JOB_SECONDS}), "--queue", cluster.queue,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    worker = cluster.start_worker("node-a", concurrency=2, pool=pool)
    triggered = cluster.manage("jobs", "run", "long")
    assert triggered.returncode == 0, triggered.stderr
    run = JobRun.objects.get(pk=int(triggered.stdout.strip()))
    wait_for(
        lambda: JobRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING).exists(),
        timeout=60,
        what="the run to start",
    )

    asked_at, asked = timezone.now(), time.monotonic()
    os.kill(worker.pid, signal.SIGTERM)  # the main process only, as docker stop does
    assert worker.wait(timeout=JOB_SECONDS / 2) == 0, cluster.log_of("node-a")
    took = time.monotonic() - asked

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.finished_at is not None and run.finished_at >= asked_at, "ended before it was asked"
    assert run.result == "stopped"  # the function saw ctx.stopping; it did not time out
    assert took < JOB_SECONDS / 4, f"the worker took {took:.1f} s to stop"


def test_a_run_still_waiting_for_its_lease_is_handed_back_to_another_worker(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Overlap ``wait``: a run waiting for a lease someone else holds would hold a warm shutdown
    up until its start deadline. It stops waiting, goes back to ``scheduled`` and is
    re-published; another worker runs it, once, when the lease frees."""
    log = tmp_path / "executions.log"
    added = cluster.manage(
        "jobs", "add", "waiter", "--task", "tests.record", "--every", "1h",
        "--kwargs", json.dumps({"log": str(log)}), "--queue", cluster.queue,
        "--overlap", "wait", "--start-deadline", "300s",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    held = lease.acquire("job:waiter", "another-node:1:run-0", 300)
    assert held is not None
    first = cluster.start_worker("node-a", concurrency=1)
    triggered = cluster.manage("jobs", "run", "waiter")
    assert triggered.returncode == 0, triggered.stderr
    run = JobRun.objects.get(pk=int(triggered.stdout.strip()))
    waiting = JobRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING, node__startswith="node-a")
    wait_for(waiting.exists, timeout=60, what="the run to wait for its lease on node-a")

    os.kill(first.pid, signal.SIGTERM)
    assert first.wait(timeout=30) == 0, cluster.log_of("node-a")
    run.refresh_from_db()
    assert (run.status, run.node, run.fencing_token) == (RunStatus.SCHEDULED, "", None)

    assert lease.release(held)
    cluster.start_worker("node-b", concurrency=1)
    wait_for(
        lambda: JobRun.objects.filter(pk=run.pk, status=RunStatus.SUCCEEDED).exists(),
        timeout=60,
        what="the handed-back run to succeed on node-b",
    )
    run.refresh_from_db()
    assert run.node.startswith("node-b")
    assert log.read_text().split().count(str(run.pk)) == 1
