"""Issue 10 acceptance: a run past its hard time limit, on a real prefork worker (Celery's own
limit, not a simulated clock), ends ``failed`` saying why, its lease is given back at once, and
the job's next slot runs on time, instead of being skipped on a lease held until its ttl and
the run recorded ``lost`` by maintenance."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.db import connection

from jobs.audit import Actor
from jobs.models import Job, JobRun, Lease, RunStatus
from jobs.schedule.kinds import Every
from jobs.services import JobDefinition, create_job
from tests.acceptance.conftest import Cluster, wait_for

pytestmark = pytest.mark.acceptance

TIME_LIMIT = 2
EVERY = 4
RUNS = 3
# From the start of a run to its failure on record: the limit, the kill (SIGTERM, SIGKILL 0.1 s
# later) and one statement.
RECORDED_WITHIN = TIME_LIMIT + 1.0
# From a slot to its run's start: beat tick, publish, claim (a busy 2-core machine).
START_LAG = 1.0


def _db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone()
    return now


def _runs(job: Job) -> list[JobRun]:
    return list(JobRun.objects.filter(job=job).order_by("scheduled_for"))


def test_a_run_past_its_hard_time_limit_fails_and_frees_the_next_slot(cluster: Cluster) -> None:
    """A job that sleeps 30 s (deaf to ctx.stopping) with a hard limit of 2 s, every 4 s, its
    lease ttl the default 30 s, on one worker and one beat: 3 slots in a row."""
    cluster.start_worker("worker", concurrency=2)
    cluster.start_beat("beat", env={"JOBS_MAINTENANCE_INTERVAL": "0.5"})
    wait_for(
        lambda: " ready." in cluster.log_of("worker") and "beat loaded" in cluster.log_of("beat"),
        timeout=90,
        what="the worker ready and the beat loaded",
        poll=0.5,
    )
    # Added while both run, so its first slot is not the worker's start-up.
    job = create_job(
        JobDefinition(
            name="overrun",
            task="tests.deaf",
            schedule=Every(EVERY),
            kwargs={"seconds": 30},
            policies={"queue": cluster.queue, "time_limit": TIME_LIMIT},
        ),
        actor=Actor.code("tests"),
    )
    assert job.lease_ttl == 30  # without the release, the next slot would be skipped

    seen: set[int] = set()
    while len(seen) < RUNS:
        # Each run as soon as it is on record as failed: its lease must be free right then.
        def next_failed() -> bool:
            return any(r.status == RunStatus.FAILED and r.pk not in seen for r in _runs(job))

        wait_for(next_failed, timeout=3 * EVERY, what="a run to fail")
        now = _db_now()
        for run in _runs(job):
            if run.status != RunStatus.FAILED or run.pk in seen:
                continue
            seen.add(run.pk)
            lease = Lease.objects.get(key=job.lock_key)
            # Released: expired by the database clock, or already taken by the next slot's run.
            assert lease.token > (run.fencing_token or 0) or lease.expires_at <= now, (
                f"run {run.pk}'s lease still held: {lease.holder} #{lease.token} until "
                f"{lease.expires_at} (now {now})"
            )

    runs = [run for run in _runs(job) if run.pk in seen]
    for run in runs:
        assert run.error == (
            f"hard time limit of {TIME_LIMIT} s exceeded: the worker killed the process running it"
        ), run.error
        assert run.duration is not None and run.duration <= RECORDED_WITHIN, (run.pk, run.duration)
        assert run.lag is not None and run.lag <= START_LAG, (run.pk, run.lag)
    # One run per slot and no slot skipped between them: each started on its own time.
    slots = [run.scheduled_for for run in runs]
    assert slots == [slots[0] + timedelta(seconds=EVERY * i) for i in range(RUNS)], slots
    tokens = [run.fencing_token or 0 for run in runs]
    assert tokens == sorted(set(tokens)) and tokens[0] > 0, tokens
    statuses = set(JobRun.objects.filter(job=job).values_list("status", flat=True))
    assert statuses <= {RunStatus.FAILED, RunStatus.RUNNING, RunStatus.SCHEDULED}, statuses
    assert "Hard time limit (2s) exceeded" in cluster.log_of("worker")
