"""Run records, the worker's statements (jobs.guard.run_records), against real PostgreSQL: a run
is claimed once (with its lease, or not), its lease taken later for a key from its arguments,
handed back, finished fenced by its token or unleased (with the retry that is due), failed
unclaimed, and a claim or finish whose reply a cut connection lost read back. (A slot's first
record is the beat's: test_slot_records.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from jobs.guard import lease, run_records
from jobs.guard.lease import LeaseHolder
from jobs.models import Job, JobRun, RunStatus, Trigger
from tests.support.job_factory import new_run

pytestmark = pytest.mark.django_db(transaction=True)

HOLDER = "n1:1:run"


def _claimed(job: Job, *, holder: str | None = HOLDER, keyed: bool = False) -> run_records.Claim:
    """A run of ``job`` claimed by node n1, with the job's lease taken as ``holder`` unless
    ``holder`` is None or the job's lock key is derived from its arguments (``keyed``)."""
    run = new_run(job)
    claim = run_records.claim(
        run.pk, node="n1", pid=1, task_id="t", holder=holder,
        keyed_tasks=[job.task] if keyed else (),
    )  # fmt: skip
    assert claim is not None and claim.status == RunStatus.RUNNING
    return claim


def _stored(claim: run_records.Claim) -> JobRun:
    return JobRun.objects.get(pk=claim.run_id)


# --- claim ------------------------------------------------------------------------------------


def test_a_run_is_claimed_once_and_repeats_are_counted(make_job: Callable[..., Job]) -> None:
    run = new_run(make_job())
    claim = run_records.claim(run.pk, node="n1", pid=1, task_id="t")
    assert claim is not None and claim.status == RunStatus.RUNNING
    assert run_records.claim(run.pk, node="n2", pid=2, task_id="t") is None
    assert run_records.count_duplicate(run.pk) == RunStatus.RUNNING
    run.refresh_from_db()
    assert (run.node, run.duplicate_deliveries) == ("n1", 1)


def test_a_claim_past_the_start_deadline_records_missed(make_job: Callable[..., Job]) -> None:
    run = new_run(make_job(start_deadline=60), ago=90)
    claim = run_records.claim(run.pk, node="n1", pid=1, task_id="t")
    assert claim is not None and claim.status == RunStatus.MISSED
    run.refresh_from_db()
    assert run.status == RunStatus.MISSED
    assert "past the start deadline of 60 s" in run.error
    assert run.finished_at is not None


def test_a_claim_with_a_holder_takes_the_jobs_lease_and_records_its_token(
    make_job: Callable[..., Job],
) -> None:
    job = make_job()
    claim = _claimed(job)
    assert claim.lease is not None
    assert (claim.lease.key, claim.lease.holder, claim.lease.token) == (job.lock_key, HOLDER, 1)
    assert claim.job.pk == job.pk and claim.job.task == job.task
    assert lease.current_holder(job.lock_key) == LeaseHolder(holder=HOLDER, token=1)
    run = _stored(claim)
    assert (run.fencing_token, run.lease_key, run.node, run.pid) == (1, job.lock_key, "n1", 1)


def test_a_claim_takes_no_lease_for_a_keyed_task_nor_without_a_holder(
    make_job: Callable[..., Job],
) -> None:
    keyed = _claimed(make_job("keyed"), keyed=True)
    anonymous = _claimed(make_job("anonymous"), holder=None)
    assert keyed.lease is None and anonymous.lease is None
    assert _stored(keyed).fencing_token is None and _stored(anonymous).fencing_token is None
    assert lease.current_holder(keyed.job.lock_key) is None


def test_a_claim_of_a_job_whose_lease_is_held_under_skip_is_recorded_skipped(
    make_job: Callable[..., Job],
) -> None:
    job = make_job(overlap="skip")
    assert lease.acquire(job.lock_key, "elsewhere:9:run-1", 30) is not None
    run = new_run(job)
    claim = run_records.claim(run.pk, node="n1", pid=1, task_id="t", holder=HOLDER)
    assert claim is not None and claim.status == RunStatus.SKIPPED and claim.lease is None
    assert "elsewhere:9:run-1" in claim.error
    assert _stored(claim).status == RunStatus.SKIPPED


def test_count_duplicate_of_no_run_says_none(make_job: Callable[..., Job]) -> None:
    run = new_run(make_job())
    assert run_records.count_duplicate(run.pk) == RunStatus.SCHEDULED
    assert run_records.count_duplicate(run.pk + 1000) is None


def test_reclaim_reads_back_the_claim_of_this_delivery_only(
    make_job: Callable[..., Job],
) -> None:
    claim = _claimed(make_job())
    assert claim.lease is not None
    sent = time.monotonic()
    again = run_records.reclaim(
        claim.run_id, node="n1", pid=1, task_id="t", holder=HOLDER, claimed_at=sent
    )
    assert again is not None and again.status == RunStatus.RUNNING
    assert again.lease is not None and again.lease.token == claim.lease.token
    assert again.job.pk == claim.job.pk
    for node, pid, task_id in (("n1", 1, "u"), ("n1", 2, "t"), ("n2", 1, "t")):
        other = run_records.reclaim(
            claim.run_id, node=node, pid=pid, task_id=task_id, holder=HOLDER, claimed_at=sent
        )
        assert other is None


def test_reclaim_finds_nothing_once_the_claims_lease_lapsed(make_job: Callable[..., Job]) -> None:
    claim = _claimed(make_job())
    assert claim.lease is not None and lease.force_release(claim.lease.key)
    assert (
        run_records.reclaim(
            claim.run_id, node="n1", pid=1, task_id="t", holder=HOLDER,
            claimed_at=time.monotonic(),
        )
        is None
    )  # fmt: skip


def test_reclaim_finds_nothing_when_the_claim_never_committed(
    make_job: Callable[..., Job],
) -> None:
    run = new_run(make_job())
    found = run_records.reclaim(
        run.pk, node="n1", pid=1, task_id="t", holder=HOLDER, claimed_at=time.monotonic()
    )
    assert found is None


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
    run = new_run(make_job())
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


# --- a lease taken after the claim ---------------------------------------------------------


def test_acquire_for_run_takes_the_key_and_records_the_token_on_the_run(
    make_job: Callable[..., Job],
) -> None:
    claim = _claimed(make_job(), keyed=True)
    attempt = run_records.acquire_for_run(
        claim.run_id, key="by-city:paris", holder=HOLDER, ttl=30, within_deadline=True
    )
    assert attempt is not None and not attempt.late and attempt.held_by is None
    assert attempt.lease is not None
    assert (attempt.lease.key, attempt.lease.token) == ("by-city:paris", 1)
    run = _stored(claim)
    assert (run.lease_key, run.fencing_token) == ("by-city:paris", 1)
    # The run holds a token now: a second try is not its to make.
    again = run_records.acquire_for_run(
        claim.run_id, key="by-city:paris", holder=HOLDER, ttl=30, within_deadline=True
    )
    assert again is None


def test_acquire_for_run_names_the_holder_of_a_key_held_elsewhere(
    make_job: Callable[..., Job],
) -> None:
    claim = _claimed(make_job(), keyed=True)
    assert lease.acquire("by-city:paris", "n2:2:run-7", 30) is not None
    attempt = run_records.acquire_for_run(
        claim.run_id, key="by-city:paris", holder=HOLDER, ttl=30, within_deadline=True
    )
    assert attempt is not None and attempt.lease is None
    assert attempt.held_by == LeaseHolder(holder="n2:2:run-7", token=1)
    assert _stored(claim).fencing_token is None


def test_acquire_for_run_past_the_start_deadline_takes_nothing_within_the_deadline(
    make_job: Callable[..., Job],
) -> None:
    claim = _claimed(make_job(start_deadline=60), keyed=True)
    JobRun.objects.filter(pk=claim.run_id).update(
        scheduled_for=timezone.now() - timedelta(seconds=120)
    )
    late = run_records.acquire_for_run(
        claim.run_id, key="k", holder=HOLDER, ttl=30, within_deadline=True
    )
    assert late is not None and late.late and late.lease is None
    anyway = run_records.acquire_for_run(
        claim.run_id, key="k", holder=HOLDER, ttl=30, within_deadline=False
    )
    assert anyway is not None and anyway.late and anyway.lease is not None


def test_lease_taken_for_run_reads_back_this_holders_lease_only(
    make_job: Callable[..., Job],
) -> None:
    claim = _claimed(make_job(), keyed=True)
    sent = time.monotonic()
    assert (
        run_records.lease_taken_for_run(claim.run_id, holder=HOLDER, ttl=30, sent_at=sent) is None
    )
    run_records.acquire_for_run(claim.run_id, key="k", holder=HOLDER, ttl=30, within_deadline=True)
    held = run_records.lease_taken_for_run(claim.run_id, holder=HOLDER, ttl=30, sent_at=sent)
    assert held is not None and (held.key, held.token, held.holder) == ("k", 1, HOLDER)
    assert run_records.lease_taken_for_run(claim.run_id, holder="n2", ttl=30, sent_at=sent) is None


# --- hand back ----------------------------------------------------------------------------------


def test_a_claimed_run_without_a_lease_is_handed_back_to_scheduled(
    make_job: Callable[..., Job],
) -> None:
    claim = _claimed(make_job(), keyed=True)
    assert run_records.hand_back(claim.run_id) == claim.scheduled_for
    run = _stored(claim)
    assert (run.status, run.node, run.pid, run.task_id) == (RunStatus.SCHEDULED, "", None, "")
    assert run.started_at is None and run.dispatched_at is not None
    assert run_records.hand_back(claim.run_id) is None  # no longer running: not this worker's


def test_a_run_holding_a_lease_is_not_handed_back(make_job: Callable[..., Job]) -> None:
    claim = _claimed(make_job())
    assert run_records.hand_back(claim.run_id) is None
    assert _stored(claim).status == RunStatus.RUNNING


# --- finish -------------------------------------------------------------------------------------


def test_a_fenced_finish_records_the_outcome_and_gives_the_lease_back(
    make_job: Callable[..., Job],
) -> None:
    claim = _claimed(make_job())
    assert claim.lease is not None
    finished = run_records.finish_fenced(
        claim.run_id, key=claim.lease.key, token=claim.lease.token,
        status=RunStatus.SUCCEEDED, result='"done"',
    )  # fmt: skip
    assert finished == run_records.Finished(status=RunStatus.SUCCEEDED, retry=None)
    run = _stored(claim)
    assert (run.status, run.result) == (RunStatus.SUCCEEDED, "done")
    assert run.finished_at is not None
    assert lease.current_holder(claim.lease.key) is None


def test_a_fenced_finish_with_a_token_no_longer_held_records_lost(
    make_job: Callable[..., Job],
) -> None:
    claim = _claimed(make_job())
    assert claim.lease is not None and lease.force_release(claim.lease.key)
    newer = lease.acquire(claim.lease.key, "usurper", 30)
    assert newer is not None
    finished = run_records.finish_fenced(
        claim.run_id, key=claim.lease.key, token=claim.lease.token, status=RunStatus.SUCCEEDED
    )
    assert finished.status == RunStatus.LOST
    assert _stored(claim).status == RunStatus.LOST
    assert lease.current_holder(claim.lease.key) == LeaseHolder("usurper", newer.token)


def test_a_failed_fenced_finish_with_a_retry_delay_records_the_retry_with_it(
    make_job: Callable[..., Job],
) -> None:
    claim = _claimed(make_job(max_retries=2))
    assert claim.lease is not None
    before = timezone.now()
    finished = run_records.finish_fenced(
        claim.run_id, key=claim.lease.key, token=claim.lease.token,
        status=RunStatus.FAILED, error="ValueError: boom", traceback="Traceback ...",
        retry_delay=30,
    )  # fmt: skip
    assert finished.status == RunStatus.FAILED and finished.retry is not None
    retry = JobRun.objects.get(pk=finished.retry.run_id)
    assert (retry.trigger, retry.attempt, retry.retry_of_id) == (Trigger.RETRY, 2, claim.run_id)
    assert retry.status == RunStatus.SCHEDULED
    assert before + timedelta(seconds=29) < retry.scheduled_for < before + timedelta(seconds=40)
    failed = _stored(claim)
    assert (failed.error, failed.traceback) == ("ValueError: boom", "Traceback ...")


def test_an_unleased_finish_records_once_and_never_for_a_run_holding_a_token(
    make_job: Callable[..., Job],
) -> None:
    unleased = _claimed(make_job("unleased"), holder=None)
    first = run_records.finish_unleased(unleased.run_id, status=RunStatus.SKIPPED, error="why")
    assert first == run_records.Finished(status=RunStatus.SKIPPED, retry=None)
    assert (_stored(unleased).status, _stored(unleased).error) == (RunStatus.SKIPPED, "why")
    assert run_records.finish_unleased(unleased.run_id, status=RunStatus.FAILED).status is None
    leased = _claimed(make_job("leased"))
    assert run_records.finish_unleased(leased.run_id, status=RunStatus.SUCCEEDED).status is None
    assert _stored(leased).status == RunStatus.RUNNING


def test_recorded_status_reads_a_finish_back_by_its_token(make_job: Callable[..., Job]) -> None:
    claim = _claimed(make_job())
    assert claim.lease is not None
    token = claim.lease.token
    assert run_records.recorded_status(claim.run_id, token=token) is None  # still running
    run_records.finish_fenced(
        claim.run_id, key=claim.lease.key, token=token, status=RunStatus.SUCCEEDED
    )
    assert run_records.recorded_status(claim.run_id, token=token) == RunStatus.SUCCEEDED
    assert run_records.recorded_status(claim.run_id, token=token + 1) is None
    assert run_records.recorded_status(claim.run_id, token=None) is None


# --- never run ----------------------------------------------------------------------------------


def test_an_unclaimed_run_is_failed_without_running_and_a_claimed_one_is_not(
    make_job: Callable[..., Job],
) -> None:
    job = make_job()
    run = new_run(job)
    assert run_records.fail_unclaimed(run.pk, node="beat-1", error="no such task")
    run.refresh_from_db()
    assert (run.status, run.node, run.error) == (RunStatus.FAILED, "beat-1", "no such task")
    assert run.finished_at is not None
    assert not run_records.fail_unclaimed(run.pk, node="beat-1", error="again")
    claimed = _claimed(job)
    assert not run_records.fail_unclaimed(claimed.run_id, node="beat-1", error="late")
    assert _stored(claimed).status == RunStatus.RUNNING
