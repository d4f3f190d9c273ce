"""Run records and the worker-side runner, against real PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from jobs.audit import Actor
from jobs.guard import lease, run_records
from jobs.guard.runner import execute_run
from jobs.models import Job, JobRun, RunStatus, Trigger

pytestmark = pytest.mark.django_db(transaction=True)


def _run_for(job: Job, ago: float = 0.0) -> JobRun:
    return JobRun.objects.create(
        job=job, scheduled_for=timezone.now() - timedelta(seconds=ago), trigger=Trigger.SCHEDULED
    )


def test_the_first_insert_of_a_slot_wins_and_repeats_create_nothing(
    make_job: Callable[..., Job],
) -> None:
    a, b = make_job("a"), make_job("b")
    slot = timezone.now().replace(microsecond=0)
    first = run_records.insert_scheduled([(a.pk, slot), (b.pk, slot)])
    again = run_records.insert_scheduled([(a.pk, slot), (b.pk, slot)])
    assert {run.job_id for run in first} == {a.pk, b.pk}
    assert again == []
    assert JobRun.objects.filter(scheduled_for=slot).count() == 2


def test_manual_runs_may_share_a_slot_with_the_scheduled_one(make_job: Callable[..., Job]) -> None:
    job = make_job()
    slot = timezone.now().replace(microsecond=0)
    run_records.insert_scheduled([(job.pk, slot)])
    JobRun.objects.create(job=job, scheduled_for=slot, trigger=Trigger.MANUAL)
    assert JobRun.objects.filter(job=job).count() == 2


def test_a_run_is_claimed_once_and_repeats_are_counted(make_job: Callable[..., Job]) -> None:
    run = _run_for(make_job())
    claim = run_records.claim(run.pk, node="n1", pid=1, task_id="t")
    assert claim is not None and claim.status == RunStatus.RUNNING
    assert run_records.claim(run.pk, node="n2", pid=2, task_id="t") is None
    assert run_records.count_duplicate(run.pk) == RunStatus.RUNNING
    run.refresh_from_db()
    assert (run.node, run.duplicate_deliveries) == ("n1", 1)


def test_a_claim_past_the_start_deadline_records_missed(make_job: Callable[..., Job]) -> None:
    run = _run_for(make_job(start_deadline=60), ago=90)
    claim = run_records.claim(run.pk, node="n1", pid=1, task_id="t")
    assert claim is not None and claim.status == RunStatus.MISSED
    run.refresh_from_db()
    assert run.status == RunStatus.MISSED
    assert "past the start deadline of 60 s" in run.error
    assert run.finished_at is not None


def test_execute_run_succeeds_once_and_records_everything(
    make_job: Callable[..., Job], tmp_path: Path
) -> None:
    log = tmp_path / "executions.log"
    run = _run_for(make_job(kwargs={"log": str(log)}))
    execute_run(run.pk, task_id="task-1", node="node-a")
    execute_run(run.pk, task_id="task-1", node="node-b")  # a redelivery
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert run.node == "node-a" and run.pid is not None and run.task_id == "task-1"
    assert run.fencing_token == 1 and run.lease_key == "job:j"
    assert run.started_at is not None and run.finished_at is not None
    assert run.result == "recorded"
    assert run.duplicate_deliveries == 1
    assert len(log.read_text().splitlines()) == 1
    # The lease was given back at once.
    assert lease.acquire("job:j", "someone", 30) is not None


def test_a_failing_job_records_error_and_traceback(make_job: Callable[..., Job]) -> None:
    run = _run_for(make_job(task="tests.fail"))
    execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error == "ValueError: boom from tests.fail"
    assert "raise ValueError" in run.traceback


def test_overlap_skip_records_the_holder(make_job: Callable[..., Job], tmp_path: Path) -> None:
    job = make_job(kwargs={"log": str(tmp_path / "log")})
    assert lease.acquire(job.lock_key, "other-node:1:run-99", 30) is not None
    run = _run_for(job)
    execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert run.status == RunStatus.SKIPPED
    assert "other-node:1:run-99" in run.error
    assert not (tmp_path / "log").exists()


def test_overlap_allow_runs_without_a_lease(make_job: Callable[..., Job], tmp_path: Path) -> None:
    job = make_job(kwargs={"log": str(tmp_path / "log")}, overlap="allow")
    assert lease.acquire(job.lock_key, "other", 30) is not None
    run = _run_for(job)
    execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.fencing_token is None


def test_an_unregistered_function_fails_the_run_with_a_clear_error(
    make_job: Callable[..., Job],
) -> None:
    job = make_job()
    Job.objects.filter(pk=job.pk).update(task="gone.function")
    run = _run_for(job)
    execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "'gone.function' is not a registered job function" in run.error


def test_a_run_whose_lease_is_taken_away_is_recorded_lost(make_job: Callable[..., Job]) -> None:
    job = make_job(task="tests.wait_for_stop", lease_ttl=3)
    run = _run_for(job)

    def run_on_a_worker_thread() -> None:
        try:
            execute_run(run.pk, task_id="t", node="n")
        finally:
            connection.close()

    worker = threading.Thread(target=run_on_a_worker_thread)
    worker.start()
    deadline = time.monotonic() + 10
    while not JobRun.objects.filter(pk=run.pk, fencing_token__isnull=False).exists():
        assert time.monotonic() < deadline, "the run never took its lease"
        time.sleep(0.05)
    assert lease.force_release(job.lock_key)
    newer = lease.acquire(job.lock_key, "usurper", 30)
    assert newer is not None
    worker.join(timeout=10)
    assert not worker.is_alive()
    run.refresh_from_db()
    assert run.status == RunStatus.LOST
    assert newer.token > (run.fencing_token or 0)


def test_a_continuous_job_cannot_be_triggered(make_job: Callable[..., Job]) -> None:
    from jobs.exceptions import NotTriggerable
    from jobs.services import run_now

    job = make_job("forever", task="tests.wait_for_stop", schedule=None)
    with pytest.raises(NotTriggerable, match="continuous job"):
        run_now(job.name, actor=Actor.code("tests"))
    assert not JobRun.objects.filter(job=job).exists()


def _concurrently(count: int, action: Callable[[int], object]) -> list[object]:
    """``action(i)`` on ``count`` threads (each its own connection), released together."""
    start = threading.Barrier(count)
    results: list[object] = [None] * count

    def work(i: int) -> None:
        try:
            start.wait()
            results[i] = action(i)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def test_concurrent_claims_of_one_run_give_it_to_exactly_one(
    make_job: Callable[..., Job],
) -> None:
    run = _run_for(make_job())
    claims = _concurrently(
        6,
        lambda i: run_records.claim(run.pk, node=f"n{i}", pid=i, task_id="t", holder=f"n{i}:run"),
    )
    won = [claim for claim in claims if claim is not None]
    assert len(won) == 1
    winner = won[0]
    assert isinstance(winner, run_records.Claim) and winner.lease is not None
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert (run.node, run.fencing_token) == (winner.lease.holder.split(":")[0], winner.lease.token)


def test_concurrent_claims_of_one_jobs_runs_let_one_hold_and_record_the_rest_skipped(
    make_job: Callable[..., Job],
) -> None:
    job = make_job(overlap="skip")
    runs = [
        JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.MANUAL)
        for _ in range(6)
    ]
    claims = _concurrently(
        6,
        lambda i: run_records.claim(runs[i].pk, node=f"n{i}", pid=i, task_id="t", holder=f"n{i}:r"),
    )
    assert all(isinstance(claim, run_records.Claim) for claim in claims)
    holders = [c for c in claims if isinstance(c, run_records.Claim) and c.lease is not None]
    assert len(holders) == 1
    holder = holders[0]
    assert holder.lease is not None
    statuses = sorted(JobRun.objects.filter(job=job).values_list("status", flat=True))
    assert statuses == [RunStatus.RUNNING] + [RunStatus.SKIPPED] * 5
    for skipped in JobRun.objects.filter(job=job, status=RunStatus.SKIPPED):
        assert f"held by {holder.lease.holder} (token {holder.lease.token})" in skipped.error
        assert skipped.fencing_token is None and skipped.finished_at is not None
