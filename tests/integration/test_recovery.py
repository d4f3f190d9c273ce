"""Detecting lost runs (jobs.upkeep.recovery) and on_lost, against real PostgreSQL."""

from __future__ import annotations

import io
import re
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from jobs.audit import Actor
from jobs.context import first_attempt
from jobs.guard import lease, run_records
from jobs.guard.runner import execute_run
from jobs.models import Job, JobRun, RunStatus, Trigger
from jobs.upkeep.recovery import recover_lost_runs
from jobs.web import tokens
from tests.integration.conftest import Published
from tests.support.threads_at_once import at_once
from tests.support.worker_threads import lease_taken_mid_run

pytestmark = pytest.mark.django_db(transaction=True)

TESTS = Actor.code("tests")


def _running(job: Job, holder: str = "node-x:1:run") -> JobRun:
    """A run claimed (with its lease) by a worker that will never finish it."""
    run = JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.MANUAL)
    claim = run_records.claim(run.pk, node="node-x", pid=1, task_id="t", holder=holder)
    assert claim is not None and claim.lease is not None
    run.refresh_from_db()
    return run


def _later(seconds: float) -> datetime:
    return timezone.now() + timedelta(seconds=seconds)


def test_a_run_whose_lease_lapsed_is_lost_and_a_live_one_is_not(
    make_job: Callable[..., Job], published: Published
) -> None:
    dead = _running(make_job("dead", lease_ttl=30))
    alive = _running(make_job("alive", lease_ttl=600))
    assert recover_lost_runs() == []  # both leases live now
    assert recover_lost_runs(now=_later(60)) == [dead.pk]
    dead.refresh_from_db()
    alive.refresh_from_db()
    assert dead.status == RunStatus.LOST and dead.finished_at is not None
    assert dead.error == (
        f"lease job:dead (token {dead.fencing_token}) lapsed while the run was running: "
        "its worker died, hung or lost the database"
    )
    assert alive.status == RunStatus.RUNNING
    assert recover_lost_runs(now=_later(60)) == []  # recorded once
    assert published == []  # on_lost=abandon (the default): no retry


def test_a_run_whose_token_moved_on_is_lost_at_once(make_job: Callable[..., Job]) -> None:
    job = make_job()
    run = _running(job)
    assert lease.force_release(job.lock_key)
    assert lease.acquire(job.lock_key, "newer", 30) is not None
    assert recover_lost_runs() == [run.pk]


def test_on_lost_retry_reruns_once_with_a_higher_token(
    make_job: Callable[..., Job], published: Published, tmp_path: Any
) -> None:
    job = make_job(on_lost="retry", lease_ttl=3)
    run = _running(job)
    assert recover_lost_runs(now=_later(10)) == [run.pk]
    retry = JobRun.objects.get(retry_of=run)
    assert (retry.trigger, retry.attempt, retry.status) == (Trigger.RETRY, 2, RunStatus.SCHEDULED)
    assert [run_id for run_id, _ in published] == [retry.pk]
    # The rerun's ctx.idempotency_key is the lost run's: the remote side can drop a repeat.
    assert first_attempt(retry.pk) == run.pk
    assert recover_lost_runs(now=_later(10)) == []
    assert JobRun.objects.filter(retry_of=run).count() == 1
    # The old lease lapses by itself (ttl 3 s); the retry then takes a higher token.
    deadline = time.monotonic() + 10
    while lease.current_holder(job.lock_key) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    execute_run(retry.pk, task_id="t", node="node-y")
    retry.refresh_from_db()
    assert retry.status == RunStatus.SUCCEEDED
    assert (retry.fencing_token or 0) > (run.fencing_token or 0)


def test_the_retry_of_a_lost_run_is_not_retried_when_lost_again(
    make_job: Callable[..., Job], published: Published
) -> None:
    job = make_job(on_lost="retry")
    run = _running(job)
    assert recover_lost_runs(now=_later(60)) == [run.pk]
    retry = JobRun.objects.get(retry_of=run)
    assert lease.force_release(job.lock_key)
    claim = run_records.claim(retry.pk, node="node-y", pid=2, task_id="t", holder="node-y:2:run")
    assert claim is not None and claim.lease is not None
    assert recover_lost_runs(now=_later(120)) == [retry.pk]
    assert not JobRun.objects.filter(retry_of=retry).exists()
    assert len(published) == 1


def test_a_lost_runs_late_finish_records_nothing(make_job: Callable[..., Job]) -> None:
    job = make_job()
    run = _running(job)
    assert lease.force_release(job.lock_key)
    newer = lease.acquire(job.lock_key, "newer", 30)
    assert newer is not None
    assert recover_lost_runs() == [run.pk]
    finished = run_records.finish_fenced(
        run.pk, key=job.lock_key, token=run.fencing_token or 0, status=RunStatus.SUCCEEDED
    )
    assert finished.status is None
    run.refresh_from_db()
    assert run.status == RunStatus.LOST
    assert lease.current_holder(job.lock_key) == lease.LeaseHolder("newer", newer.token)


def test_a_run_still_waiting_for_its_lease_long_after_its_deadline_is_lost(
    make_job: Callable[..., Job],
) -> None:
    job = make_job(overlap="wait", start_deadline=60, lease_ttl=30)
    assert lease.acquire(job.lock_key, "other", 600) is not None
    run = JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.MANUAL)
    claim = run_records.claim(run.pk, node="node-x", pid=1, task_id="t", holder="node-x:1:run")
    assert claim is not None and claim.status == RunStatus.RUNNING and claim.lease is None
    assert recover_lost_runs(now=_later(80)) == []  # may still be waiting (deadline + ttl)
    assert recover_lost_runs(now=_later(100)) == [run.pk]
    run.refresh_from_db()
    assert run.error.startswith("took no lease within 90 s of its claim")
    # The worker, if it was only slow, can no longer take the lease for it.
    assert (
        run_records.acquire_for_run(
            run.pk, key=job.lock_key, holder="node-x:1:run", ttl=30, within_deadline=False
        )
        is None
    )


def test_runs_under_overlap_allow_hold_no_lease_and_are_left_alone(
    make_job: Callable[..., Job],
) -> None:
    job = make_job(overlap="allow")
    run = JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.MANUAL)
    assert run_records.claim(run.pk, node="n", pid=1, task_id="t", holder="n:1:run") is not None
    assert recover_lost_runs(now=_later(3600)) == []


def test_a_run_past_its_hard_time_limit_says_so(make_job: Callable[..., Job]) -> None:
    run = _running(make_job(time_limit=20))
    assert recover_lost_runs(now=_later(60)) == [run.pk]
    run.refresh_from_db()
    assert run.error.endswith(
        "(still running past its hard time limit of 20 s, so most likely killed by it)"
    )


def test_concurrent_recoveries_record_each_run_once(
    make_job: Callable[..., Job], published: Published
) -> None:
    runs = [_running(make_job(f"job-{i}", on_lost="retry")) for i in range(6)]
    found = at_once(3, lambda: recover_lost_runs(now=_later(60)), timeout=30)
    assert sorted(run_id for ids in found for run_id in ids) == sorted(run.pk for run in runs)
    assert JobRun.objects.filter(trigger=Trigger.RETRY).count() == 6
    assert len(published) == 6


def test_a_run_whose_lease_is_taken_away_is_lost_and_retried_under_on_lost_retry(
    make_job: Callable[..., Job], published: Published
) -> None:
    job = make_job(task="tests.wait_for_stop", lease_ttl=3, on_lost="retry")
    run = JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.MANUAL)

    lease_taken_mid_run(run.pk, job.lock_key)
    run.refresh_from_db()
    assert run.status == RunStatus.LOST
    assert "the lease was lost while the job ran" in run.error
    retry = JobRun.objects.get(retry_of=run)
    assert (retry.attempt, retry.trigger) == (2, Trigger.RETRY)
    assert [run_id for run_id, _ in published] == [retry.pk]


def test_a_lost_run_s_duration_is_an_upper_bound_in_the_admin_the_api_and_the_cli(
    make_job: Callable[..., Job], admin_client: Client
) -> None:
    # Issue 29: 40.5 s for a worker killed 26 s in, shown as if it ran that long. Its end is when
    # recovery recorded it lost; its worker stopped renewing the lease some time before, and no
    # stored row says when (the lease row is the next run's once taken again).
    job = make_job("killed", lease_ttl=10)
    run = _running(job)
    assert run.started_at is not None
    assert recover_lost_runs(now=run.started_at + timedelta(seconds=40.5)) == [run.pk]
    run.refresh_from_db()
    assert run.duration == 40.5
    done = JobRun.objects.create(
        job=job,
        scheduled_for=run.scheduled_for - timedelta(minutes=1),
        status=RunStatus.SUCCEEDED,
        started_at=run.started_at - timedelta(minutes=1),
        finished_at=run.started_at - timedelta(minutes=1) + timedelta(seconds=2),
    )
    words = "≤ 40.50 s (until recorded lost)"

    page = admin_client.get(reverse("admin:jobs_jobrun_change", args=[run.pk])).content.decode()
    listing = admin_client.get(reverse("admin:jobs_jobrun_changelist")).content.decode()
    api = Client(headers={"authorization": f"Bearer {tokens.create('t', actor=TESTS)[1]}"})
    lost, succeeded = (api.get(f"/api/runs/{pk}").json() for pk in (run.pk, done.pk))
    out = io.StringIO()
    call_command("jobs", "runs", "killed", stdout=out)

    shown = rf'field-duration.*?<div class="readonly">{re.escape(words)}</div>'
    assert re.search(shown, page, re.S)
    assert f'<td class="field-duration">{words}</td>' in listing
    assert '<td class="field-duration">2.00 s</td>' in listing
    assert (lost["duration_seconds"], lost["duration_upper_bound"]) == (40.5, True)
    assert (succeeded["duration_seconds"], succeeded["duration_upper_bound"]) == (2.0, False)
    lines = {line.split()[0]: line for line in out.getvalue().splitlines()}
    assert "  ≤ 40.5s (until recorded lost)  " in lines[str(run.pk)]
    assert "  2.0s  " in lines[str(done.pk)]
