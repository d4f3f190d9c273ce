"""Issue 3 acceptance: several live beats, one run per slot, start deadlines, maintenance and
catch-up, on real ``celery beat`` / ``celery worker`` processes.

The exactly-once tests (kills and skewed clocks; broker contents lost, duplicate deliveries) run
on both brokers, Redis and RabbitMQ (the ``broker`` fixture); catch-up does not involve the broker
and runs on Redis only; a Redis restart (the process killed and started again) and a database
restart use a Redis and a PostgreSQL of the test's own.

Executions are counted independently of the run table: ``tests.record`` appends one line per
execution (run id first) to a file. Times are read from this machine's clock, which the beats
(unless shifted on purpose) and the database share.
"""

from __future__ import annotations

import json
import signal
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from django.utils import timezone

from devtools.pgbouncer import Pooler
from devtools.services import free_port, start_redis
from jobs.beat import slot_records
from jobs.broker.messages import publish
from jobs.models import Job, JobRun, RunStatus
from tests.acceptance.conftest import Broker, Cluster, wait_for
from tests.support.private_postgres import PrivatePostgres
from tests.support.slot_history import (
    BEAT_ENV,
    START_TIMEOUT,
    assert_each_slot_once,
    count_executions,
    grid,
    next_second,
    record_jobs,
    runs_in,
    wait_settled,
    wait_started,
    wait_until,
)

pytestmark = pytest.mark.acceptance


def test_three_beats_fire_each_slot_once_through_kills_and_skewed_clocks(
    cluster: Cluster, broker: Broker, tmp_path: Path
) -> None:
    """3 beats (one exact, one 2.5 s ahead, one 2.5 s behind) + 2 workers, 20 jobs at 1-2 s
    for 30 s; the exact and the ahead beat are killed -9 after 12 s. On each broker."""
    cluster.use_broker(broker.url)
    _three_beats_with_kills(cluster, tmp_path)


@pytest.mark.parametrize("broker", ["redis"], indirect=True)
def test_three_beats_fire_each_slot_once_through_pgbouncer_in_transaction_pooling(
    cluster: Cluster, broker: Broker, pgbouncer: Pooler, tmp_path: Path
) -> None:
    """The same, every process reaching PostgreSQL through PgBouncer in transaction pooling
    (where statements prepared per connection broke the workers: 21 of ~270 slots ran)."""
    cluster.use_broker(broker.url)
    cluster.use_pooler(pgbouncer)
    _three_beats_with_kills(cluster, tmp_path)


def _three_beats_with_kills(cluster: Cluster, tmp_path: Path) -> None:
    log = tmp_path / "executions.log"
    cluster.start_worker("worker-a")
    cluster.start_worker("worker-b")
    cluster.start_beat("beat-exact", env=BEAT_ENV)
    cluster.start_beat("beat-ahead", env={**BEAT_ENV, "JOBS_BEAT_TEST_CLOCK_OFFSET": "2.5"})
    cluster.start_beat("beat-behind", env={**BEAT_ENV, "JOBS_BEAT_TEST_CLOCK_OFFSET": "-2.5"})
    wait_started(cluster, ["beat-exact", "beat-ahead", "beat-behind"], ["worker-a", "worker-b"])
    # Added while the beats run: each picks them up from the change log within a tick.
    specs = [(f"tick-1-{n}", 1) for n in range(10)] + [(f"tick-2-{n}", 2) for n in range(10)]
    # Overlap allow: on a busy machine two runs of one job may meet on the two workers, and
    # overlap skip would then rightly record one `skipped`; this test is about the beats.
    jobs = record_jobs(cluster, log, specs, overlap="allow")
    start = next_second(timezone.now()) + timedelta(seconds=2)

    wait_until(start + timedelta(seconds=12))
    cluster.kill("beat-exact")
    cluster.kill("beat-ahead")
    wait_until(start + timedelta(seconds=30))
    end = start + timedelta(seconds=26)  # the surviving beat fires 2.5 s after each slot
    wait_settled(jobs, start, end, seconds=60)

    executions = count_executions(log)
    assert max(executions.values()) == 1, "a run executed twice"
    for job, (_, seconds) in zip(jobs, specs, strict=True):
        runs = assert_each_slot_once(job, start, end, executions, seconds)
        assert {run.status for run in runs} == {RunStatus.SUCCEEDED}, job.name
    # Every beat took part: the skewed ones fired slots too, before two of them were killed.
    for beat in ("beat-exact", "beat-ahead", "beat-behind"):
        assert "created here" in cluster.log_of(beat)


def test_a_broker_flush_loses_no_slot_and_a_blocked_worker_runs_nothing_late(
    cluster: Cluster, broker: Broker, tmp_path: Path
) -> None:
    """One beat, one worker. The worker is stopped (SIGSTOP) for 7 s, during which the broker
    loses its contents (Redis: FLUSHDB; RabbitMQ: the queue purged); then the same run's message
    is published 5 times. On each broker."""
    cluster.use_broker(broker.url)
    log = tmp_path / "executions.log"
    # One process: the backlog after the stop runs one at a time, so overlap never skips.
    worker = cluster.start_worker("worker", concurrency=1)
    cluster.start_beat("beat", env=BEAT_ENV)
    wait_started(cluster, ["beat"], ["worker"])
    steady = record_jobs(cluster, log, [(f"steady-1-{n}", 1) for n in range(3)], start_deadline=60)
    [late] = record_jobs(cluster, log, [("late-2-0", 2)], start_deadline=3)
    start = next_second(timezone.now()) + timedelta(seconds=2)

    wait_until(start + timedelta(seconds=4))
    stopped_at = timezone.now()
    worker.send_signal(signal.SIGSTOP)  # the worker's main process: it stops taking messages
    try:
        wait_until(stopped_at + timedelta(seconds=3))
        lost = broker.lose_contents(cluster.queue)
        assert lost > 0, f"the {broker.kind} broker had nothing to lose"
        wait_until(stopped_at + timedelta(seconds=7))
    finally:
        worker.send_signal(signal.SIGCONT)
    resumed_at = timezone.now()
    wait_until(start + timedelta(seconds=20))
    end = start + timedelta(seconds=18)
    wait_settled([*steady, late], start, end, seconds=60)

    executions = count_executions(log)
    for job in steady:  # messages lost in the flush/purge were re-published: every slot ran, once
        runs = assert_each_slot_once(job, start, end, executions, 1)
        assert {run.status for run in runs} == {RunStatus.SUCCEEDED}, job.name
    runs = assert_each_slot_once(late, start, end, executions, 2)
    missed = [run for run in runs if run.status == RunStatus.MISSED]
    assert missed, "no slot of the blocked worker's job was recorded missed"
    for run in missed:  # around the stop only (the backlog after it may delay a few more)
        assert "start deadline of 3 s" in run.error
        assert stopped_at - timedelta(seconds=4) <= run.scheduled_for
        assert run.scheduled_for <= resumed_at + timedelta(seconds=5)
    for run in runs:
        assert run.status in (RunStatus.SUCCEEDED, RunStatus.MISSED), run
        if run.status == RunStatus.SUCCEEDED:  # never started late (database clock)
            assert run.lag is not None and run.lag <= 3.0 + 0.5, run

    # The same run's message, published 5 times: one execution, four recorded duplicates.
    [dup] = record_jobs(cluster, log, [("dup-3600-0", 3600)])
    [created] = slot_records.insert_scheduled([(dup.pk, next_second(timezone.now()))])
    with broker.producer() as producer:
        for _ in range(5):
            publish(dup, created.run_id, created.scheduled_for, producer=producer)

    def four_duplicates() -> bool:
        recorded = JobRun.objects.get(pk=created.run_id)
        return recorded.status == RunStatus.SUCCEEDED and recorded.duplicate_deliveries == 4

    wait_for(four_duplicates, timeout=60, what="one execution and 4 duplicate deliveries")
    assert count_executions(log)[created.run_id] == 1


def test_after_every_beat_was_down_the_catch_up_policy_applies(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Two beats stopped for 5 intervals (10 s), then started again: ``latest`` runs the newest
    missed slot and records the others missed, ``none`` records them all (its newest slot runs
    only if it is current: due less than half an interval before the beat came back)."""
    log = tmp_path / "executions.log"
    cluster.start_worker("worker", concurrency=1)
    cluster.start_beat("beat-1", env=BEAT_ENV)
    cluster.start_beat("beat-2", env=BEAT_ENV)
    wait_started(cluster, ["beat-1", "beat-2"], ["worker"])
    latest_job, none_job = record_jobs(
        cluster, log, [("latest-2-0", 2)], catch_up="latest"
    ) + record_jobs(cluster, log, [("none-2-0", 2)], catch_up="none")
    both = (latest_job, none_job)

    def succeeded_after(moment: datetime, count: int) -> bool:
        return all(
            JobRun.objects.filter(
                job=job, status=RunStatus.SUCCEEDED, scheduled_for__gt=moment
            ).count()
            >= count
            for job in both
        )

    wait_for(lambda: succeeded_after(timezone.now() - timedelta(minutes=1), 3), 60, "3 runs")
    for beat in ("beat-1", "beat-2"):
        cluster.kill(beat, signal.SIGTERM)
    for beat in ("beat-1", "beat-2"):
        cluster.processes[beat].wait(timeout=30)
    stopped_at = timezone.now()
    last = {job.name: _newest_slot(job) for job in both}
    wait_until(stopped_at + timedelta(seconds=10))  # the outage: 5 intervals
    restarted_at = timezone.now()
    cluster.start_beat("beat-1-again", env=BEAT_ENV)
    cluster.start_beat("beat-2-again", env=BEAT_ENV)
    wait_for(lambda: succeeded_after(restarted_at, 3), START_TIMEOUT, "3 runs after the restart")
    end = min(
        JobRun.objects.filter(job=job, status=RunStatus.SUCCEEDED)
        .order_by("-scheduled_for")
        .values_list("scheduled_for", flat=True)[0]
        for job in both
    )
    wait_settled(both, min(last.values()), end, seconds=60)

    executions = count_executions(log)
    for job, grace in ((latest_job, 2), (none_job, 1)):
        after_last = last[job.name] + timedelta(seconds=2)
        runs = assert_each_slot_once(job, after_last, end, executions, 2)
        missed = [run for run in runs if run.status == RunStatus.MISSED]
        # The missed ones are the oldest slots of the outage, contiguous, each saying why.
        assert runs[: len(missed)] == missed, job.name
        assert all(run.status == RunStatus.SUCCEEDED for run in runs[len(missed) :]), job.name
        assert all("no beat was running" in run.error for run in missed), job.name
        assert all(f"catch-up policy {job.catch_up}" in run.error for run in missed), job.name
        # Every slot that passed while no beat ran is missed, except (latest) the newest one,
        # or (none) a newest one still current when the beats came back.
        outage = [
            run for run in runs if run.scheduled_for <= restarted_at - timedelta(seconds=grace)
        ]
        assert len(outage) >= 4, job.name
        assert all(run.status == RunStatus.MISSED for run in outage), job.name
    # latest: the slot right after the missed ones is the newest missed slot, run late.
    runs = runs_in(latest_job, last[latest_job.name] + timedelta(seconds=2), end)
    newest = next(run for run in runs if run.status == RunStatus.SUCCEEDED)
    assert newest.scheduled_for > restarted_at - timedelta(seconds=2)


def _newest_slot(job: Job) -> datetime:
    newest = JobRun.objects.filter(job=job).order_by("-scheduled_for").first()
    assert newest is not None
    return newest.scheduled_for


def test_a_redis_restart_loses_no_slot_and_doubles_none(cluster: Cluster, tmp_path: Path) -> None:
    """Two beats and a worker on a Redis of the test's own, which is killed (SIGKILL: every
    connection drops, and as it keeps nothing on disk it comes back empty) and started again on
    the same port 6 s later. The beats go on recording slots in the database meanwhile; once
    Redis is back, beats and worker reconnect, maintenance re-publishes every run whose message
    never got there or was lost with it, and every slot of the window runs, once."""
    folder = tmp_path / "redis"
    folder.mkdir()
    port = free_port()
    redis = start_redis(folder, port)
    try:
        cluster.use_broker(f"redis://127.0.0.1:{port}/0")
        log = tmp_path / "executions.log"
        # One process: the backlog after the restart runs one at a time, so overlap never skips.
        cluster.start_worker("worker", concurrency=1)
        for name in ("beat-1", "beat-2"):
            cluster.start_beat(name, env=BEAT_ENV)
        wait_started(cluster, ["beat-1", "beat-2"], ["worker"])
        jobs = record_jobs(cluster, log, [(f"tick-1-{n}", 1) for n in range(2)], start_deadline=120)
        start = next_second(timezone.now()) + timedelta(seconds=2)

        wait_until(start + timedelta(seconds=4))
        redis.kill()
        redis.wait()
        down_at = timezone.now()
        wait_until(down_at + timedelta(seconds=6))
        while_down = JobRun.objects.filter(
            job__in=jobs, scheduled_for__gt=down_at + timedelta(seconds=1)
        )
        assert while_down.exists(), "the beats recorded no slot while Redis was down"
        redis = start_redis(folder, port)
        back_at = timezone.now()
        end = back_at + timedelta(seconds=6)
        wait_until(end + timedelta(seconds=1))
        wait_settled(jobs, start, end, seconds=90)

        executions = count_executions(log)
        for job in jobs:
            runs = assert_each_slot_once(job, start, end, executions, 1)
            assert {run.status for run in runs} == {RunStatus.SUCCEEDED}, job.name
            # The slots of the outage ran because maintenance published them again.
            republished = [
                r
                for r in runs
                if r.dispatched_at is not None and r.scheduled_for < back_at <= r.dispatched_at
            ]
            assert republished, f"{job.name}: no run of the outage was re-published"
    finally:
        cluster.stop_all()
        redis.kill()
        redis.wait()


def test_a_database_restart_loses_no_slot_and_doubles_none(
    cluster: Cluster, tmp_path: Path, private_postgres: PrivatePostgres
) -> None:
    """Two beats and a worker on a PostgreSQL of the test's own, stopped for 6 s and started
    again. The beats keep the slots they could not record and record them once it is back
    (within their start deadline); the worker's next claims reconnect; every slot of the window
    runs once, and each job's fencing tokens keep growing across the restart."""
    url = private_postgres.url
    cluster.env.update(DATABASE_URL=url)
    migrated = cluster.manage("migrate", "--noinput", "-v", "0")
    assert migrated.returncode == 0, migrated.stderr
    log = tmp_path / "executions.log"
    names = [f"tick-1-{n}" for n in range(2)]
    for name in names:
        added = cluster.manage(
            "jobs", "add", name, "--task", "tests.record", "--every", "1s",
            "--kwargs", json.dumps({"log": str(log)}), "--queue", cluster.queue,
            "--start-deadline", "60s",
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
    worker = cluster.start_worker("worker", concurrency=1)  # the backlog runs one at a time
    beats = [cluster.start_beat(name, env=BEAT_ENV) for name in ("beat-1", "beat-2")]
    wait_started(cluster, ["beat-1", "beat-2"], ["worker"])
    start = next_second(timezone.now()) + timedelta(seconds=2)

    # Stopped half-way between two slots, when no claim is in flight: a claim the stop cuts
    # may have committed with its reply lost, and that run is then recorded lost once its
    # lease lapses (a worker failure's record, not this test's subject; seen with the suite
    # side by side, where a slot's claim can come late enough to meet a whole-second stop).
    wait_until(start + timedelta(seconds=4.5))
    private_postgres.stop()
    wait_until(timezone.now() + timedelta(seconds=6))
    private_postgres.start()
    end = timezone.now() + timedelta(seconds=6)
    wait_until(end + timedelta(seconds=1))

    def settled() -> bool:
        rows = _private_runs(url, start, end)
        return len(rows) == 2 * len(grid(1, start, end)) and all(
            status in ("succeeded", "skipped", "missed") for *_, status, _token in rows
        )

    wait_for(settled, timeout=90, what="every slot of the window recorded and ended")
    assert [p.poll() for p in (*beats, worker)] == [None, None, None], "a process died"

    rows = _private_runs(url, start, end)
    executions = count_executions(log)
    for name in names:
        mine = [row for row in rows if row[0] == name]
        assert [row[1] for row in mine] == grid(1, start, end), f"{name}: one record per slot"
        assert {row[3] for row in mine} == {"succeeded"}, name
        assert all(executions[row[2]] == 1 for row in mine), f"{name}: a run executed twice"
        # In the order the runs were claimed: two beats publish their own inserts, so the
        # worker may get a later slot's message first, and run ids say nothing of that order.
        tokens = _tokens_in_claim_order(url, name, start, end)
        assert tokens == sorted(set(tokens)), f"{name}: fencing tokens did not keep growing"


PrivateRun = tuple[str, datetime, int, str, int]


def _tokens_in_claim_order(url: str, name: str, start: datetime, end: datetime) -> list[int]:
    """The fencing tokens of job ``name``'s scheduled runs of the window, by claim time."""
    with psycopg.connect(url, connect_timeout=2) as conn:
        rows = conn.execute(
            "SELECT r.fencing_token FROM jobs_jobrun AS r JOIN jobs_job AS j ON j.id = r.job_id"
            " WHERE j.name = %s AND r.trigger = 'scheduled' AND r.scheduled_for BETWEEN %s AND %s"
            " ORDER BY r.started_at, r.id",
            [name, start, end],
        ).fetchall()
    return [int(token or 0) for (token,) in rows]


def _private_runs(url: str, start: datetime, end: datetime) -> list[PrivateRun]:
    """(job name, slot, run id, status, token) of the window's scheduled runs, by slot."""
    with psycopg.connect(url, connect_timeout=2) as conn:
        rows = conn.execute(
            "SELECT j.name, r.scheduled_for, r.id, r.status, r.fencing_token"
            "  FROM jobs_jobrun AS r JOIN jobs_job AS j ON j.id = r.job_id"
            " WHERE r.trigger = 'scheduled' AND r.scheduled_for BETWEEN %s AND %s"
            " ORDER BY j.name, r.scheduled_for",
            [start, end],
        ).fetchall()
    return [(str(n), s, int(i), str(st), int(t or 0)) for n, s, i, st, t in rows]
