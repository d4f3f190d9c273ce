"""Issue 4 acceptance: the lease under real faults, with real ``celery worker`` processes.

A paused holder is fenced out; a redelivered message of a running run is a no-op; a killed node's
lease lapses, its run is recorded lost and (``on_lost=retry``) re-run once with a higher token.
Executions are counted from a file the job functions append to, runs from the database.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from django.db import connection

from jobs.broker.dispatch import trigger_now
from jobs.guard import lease
from jobs.models import Job, JobRun, Lease, RunStatus
from jobs.schedule.kinds import Every
from jobs.upkeep.recovery import recover_lost_runs
from tests.acceptance.conftest import Cluster, wait_for
from tests.support.job_factory import new_job

pytestmark = pytest.mark.acceptance


def _run(pk: int) -> JobRun:
    return JobRun.objects.get(pk=pk)


def _run_of(run: JobRun | None) -> JobRun:
    assert run is not None
    return run


def _lines(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


def _db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone()
    return now


@pytest.fixture
def fenced_table() -> Iterator[str]:
    """A table of the test's own for ctx.fenced() writes: (run_id, token)."""
    name = f"fenced_{uuid.uuid4().hex[:8]}"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {name} (run_id bigint NOT NULL, token bigint NOT NULL)")
    yield name
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {name}")


def test_a_paused_holder_is_fenced_out_and_recorded_lost(
    cluster: Cluster, tmp_path: Path, fenced_table: str
) -> None:
    log, hold = tmp_path / "executions.log", tmp_path / "hold"
    hold.touch()
    job = new_job(
        "fenced", "tests.fenced_write", kwargs={"table": fenced_table, "hold": str(hold)},
        log=log, queue=cluster.queue, lease_ttl=3,
    )  # fmt: skip
    cluster.start_worker("node-a", concurrency=1)
    first = trigger_now(job)
    wait_for(lambda: _run(first.pk).fencing_token is not None, 60, "node-a to take the lease")

    cluster.kill("node-a", signal.SIGSTOP)  # paused past its ttl: no renewals, no progress
    try:
        wait_for(lambda: lease.current_holder(job.lock_key) is None, 30, "the lease to lapse")
        cluster.start_worker("node-b", concurrency=1)
        hold.unlink()
        second = trigger_now(job)
        wait_for(lambda: _run(second.pk).status == RunStatus.SUCCEEDED, 60, "node-b's run")
    finally:
        cluster.kill("node-a", signal.SIGCONT)
    wait_for(lambda: _run(first.pk).status != RunStatus.RUNNING, 60, "the resumed run to end")

    first, second = _run(first.pk), _run(second.pk)
    assert first.node.startswith("node-a@") and second.node.startswith("node-b@")
    assert (second.fencing_token or 0) > (first.fencing_token or 0)
    assert first.status == RunStatus.LOST, first.error
    assert f"lease {job.lock_key} (token {first.fencing_token}) lapsed" in first.error
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT run_id, token FROM {fenced_table}")
        assert cursor.fetchall() == [(second.pk, second.fencing_token)]  # the newer work stands
    outcomes = {int(line[0]): line[-1] for line in _lines(log)}
    assert outcomes == {first.pk: "rejected", second.pk: "written"}


def test_a_redelivered_message_of_a_running_run_is_a_no_op(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "executions.log"
    cluster.env["JOBS_VISIBILITY_TIMEOUT"] = "5"
    job = new_job("slow", kwargs={"seconds": 15}, log=log, queue=cluster.queue)
    cluster.start_worker("node-a", concurrency=2)
    run = trigger_now(job)
    wait_for(lambda: _run(run.pk).status == RunStatus.RUNNING, 60, "the run to start")
    started_at = _run(run.pk).started_at
    assert started_at is not None
    # Unacknowledged for longer than the visibility timeout: Redis hands the message out again
    # when a consumer sweeps for such messages (kombu does on start-up, then periodically).
    wait_for(lambda: (_db_now() - started_at).total_seconds() > 6, 30, "the visibility timeout")
    cluster.start_worker("node-b", concurrency=1)
    wait_for(lambda: _run(run.pk).duplicate_deliveries >= 1, 45, "the redelivery")
    wait_for(lambda: _run(run.pk).status == RunStatus.SUCCEEDED, 60, "the run to finish")
    assert [line[0] for line in _lines(log)] == [str(run.pk)]  # one execution
    assert JobRun.objects.filter(job=job).count() == 1


def test_a_killed_node_loses_its_runs_and_the_next_slots_run_on_time(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "executions.log"
    holds = {"abandon": tmp_path / "hold-abandon", "retry": tmp_path / "hold-retry"}
    for hold in holds.values():
        hold.touch()
    every_2s = Every(2)
    jobs = {
        # Skip: slots that find the dead node's lease still live are recorded skipped.
        "abandon": new_job(
            "abandon", "tests.hold", every_2s, kwargs={"hold": str(holds["abandon"])}, log=log,
            queue=cluster.queue, lease_ttl=3,
        ),
        # Wait: the retry of the lost run cannot be skipped by a slot that holds the lease.
        "retry": new_job(
            "retry", "tests.hold", every_2s, kwargs={"hold": str(holds["retry"])}, log=log,
            queue=cluster.queue, lease_ttl=3, on_lost="retry", overlap="wait",
        ),
    }  # fmt: skip
    cluster.start_worker("node-a", concurrency=2)
    cluster.start_beat("beat-1")

    def held_by_node_a(job: Job) -> JobRun | None:
        return JobRun.objects.filter(
            job=job,
            status=RunStatus.RUNNING,
            fencing_token__isnull=False,
            node__startswith="node-a@",
        ).first()

    wait_for(lambda: all(held_by_node_a(j) for j in jobs.values()), 60, "node-a holding both")
    doomed = {name: _run_of(held_by_node_a(job)) for name, job in jobs.items()}
    cluster.start_worker("node-b", concurrency=4)
    wait_for(lambda: " ready." in cluster.log_of("node-b"), 60, "node-b to be ready")

    cluster.kill("node-a")  # SIGKILL, the whole process group
    expiry = {name: Lease.objects.get(key=job.lock_key).expires_at for name, job in jobs.items()}
    for hold in holds.values():
        hold.unlink()

    def first_run_after_expiry(name: str) -> JobRun | None:
        return (
            JobRun.objects.filter(
                job=jobs[name], trigger="scheduled", scheduled_for__gte=expiry[name]
            )
            .order_by("scheduled_for")
            .first()
        )

    def ran(name: str) -> bool:
        run = first_run_after_expiry(name)
        return run is not None and run.status == RunStatus.SUCCEEDED

    wait_for(lambda: ran("abandon") and ran("retry"), 60, "the first slots after the lapse")
    on_time = first_run_after_expiry("abandon")
    assert on_time is not None and on_time.node.startswith("node-b@")
    assert on_time.lag is not None and on_time.lag < 3, "the next slot did not run on time"
    # Slots that came while the dead node's lease was still live were skipped, not doubled.
    assert JobRun.objects.filter(job=jobs["abandon"], status=RunStatus.SKIPPED).exists()

    # Maintenance inside the beat may have recorded them already; this pass does the rest.
    recover_lost_runs()
    for run in doomed.values():
        assert _run(run.pk).status == RunStatus.LOST
    abandoned, retried = _run(doomed["abandon"].pk), _run(doomed["retry"].pk)
    assert abandoned.status == retried.status == RunStatus.LOST
    assert not JobRun.objects.filter(retry_of=abandoned).exists()
    retry = JobRun.objects.get(retry_of=retried)
    wait_for(lambda: _run(retry.pk).status == RunStatus.SUCCEEDED, 60, "the retry to run")
    retry = _run(retry.pk)
    assert retry.attempt == 2 and retry.node.startswith("node-b@")
    assert (retry.fencing_token or 0) > (retried.fencing_token or 0)
    assert recover_lost_runs() == []  # re-run once, recorded once

    executed = [int(line[0]) for line in _lines(log)]
    assert len(executed) == len(set(executed)), "a run executed twice"
    assert abandoned.pk not in executed and retried.pk not in executed  # killed mid-run
    assert retry.pk in executed
