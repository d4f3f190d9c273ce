"""A real worker's database connection cut at the worst moments (jobs.guard.reconnect).

The worker reaches PostgreSQL through a proxy (tests/support/connection_cutter.py) that cuts its
connection once: after the claim committed but before its reply arrived, or as the finish is
sent, or after the finish committed. Each time the run executes once and its record says what
happened (not ``running`` until its lease lapses, then ``lost``); executions are counted from
the file the job appends to, runs from the database.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from devtools.pgbouncer import Pooler
from jobs.broker.dispatch import trigger_now
from jobs.models import JobRun, RunStatus
from jobs.schedule.kinds import Every
from tests.acceptance.conftest import Cluster, live_database_url, wait_for
from tests.support.connection_cutter import ConnectionCutter
from tests.support.job_factory import new_job

pytestmark = pytest.mark.acceptance


@pytest.fixture
def cutter(transactional_db: None) -> Iterator[ConnectionCutter]:
    db = settings.DATABASES["default"]
    host = db.get("HOST") or "127.0.0.1"
    port = int(db.get("PORT") or 5432)
    if host.startswith("/"):  # the embedded server's socket: the proxy itself listens on TCP
        upstream: str | tuple[str, int] = f"{host}/.s.PGSQL.{port}"
    else:
        upstream = (host, port)
    proxy = ConnectionCutter(upstream)
    try:
        yield proxy
    finally:
        proxy.close()


def _through(cutter: ConnectionCutter) -> str:
    """The tests' database URL, through ``cutter``."""
    url = urlsplit(live_database_url())
    auth = url.netloc.rpartition("@")[0]
    return f"postgresql://{auth}@127.0.0.1:{cutter.port}{url.path}"


@pytest.mark.parametrize(
    ("statement", "after_commit"),
    [("jobs_claim_run", True), ("jobs_finish_run", False), ("jobs_finish_run", True)],
    ids=["claim reply lost", "finish never sent", "finish reply lost"],
)
def test_a_run_whose_connection_is_cut_runs_once_and_is_recorded(
    cluster: Cluster, cutter: ConnectionCutter, tmp_path: Path, statement: str, after_commit: bool
) -> None:
    log = tmp_path / "executions.log"
    job = new_job("cut", schedule=Every(3600), log=log, queue=cluster.queue, lease_ttl=60)
    cluster.env["DATABASE_URL"] = _through(cutter)
    cluster.start_worker("node-a", concurrency=1)
    cutter.cut(statement, after_commit=after_commit)
    run = trigger_now(job)

    def ended() -> bool:
        return JobRun.objects.get(pk=run.pk).status not in (RunStatus.SCHEDULED, RunStatus.RUNNING)

    # Well inside the lease's 60 s: an ending only through its lapse would be too late.
    wait_for(ended, 30, "the run to be recorded ended")
    recorded = JobRun.objects.get(pk=run.pk)
    assert recorded.status == RunStatus.SUCCEEDED, recorded.error
    assert len(log.read_text().splitlines()) == 1
    assert cutter.cuts == 1
    # A finish whose reply was cut shows ended once it committed, a moment before the worker
    # learns of the cut and says so.
    wait_for(
        lambda: "reconnecting to learn what was recorded" in cluster.log_of("node-a"),
        30,
        "the worker to reconnect and read back",
    )
    worker_log = cluster.log_of("node-a")
    if statement == "jobs_claim_run":  # the claim committed: read back, not made again
        assert "the cut claim had gone through" in worker_log
    # Celery was told the run's outcome, not the broken connection's error.
    wait_for(lambda: "succeeded in" in cluster.log_of("node-a"), 10, "the task to succeed")
    assert "OperationalError" not in cluster.log_of("node-a")


def test_a_claim_whose_reply_is_cut_behind_pgbouncer_runs_once(
    cluster: Cluster, pgbouncer: Pooler, tmp_path: Path
) -> None:
    """The same through PgBouncer in transaction pooling (no prepared statements: the claim's
    text goes out each time), the cut between the worker and the pooler."""
    log = tmp_path / "executions.log"
    job = new_job("pooled", schedule=Every(3600), log=log, queue=cluster.queue, lease_ttl=60)
    cutter = ConnectionCutter(("127.0.0.1", pgbouncer.port))
    try:
        cluster.use_pooler(pgbouncer)
        cluster.env["DATABASE_URL"] = pgbouncer.url.replace(
            f":{pgbouncer.port}/", f":{cutter.port}/"
        )
        cluster.start_worker("node-a", concurrency=1)
        cutter.cut("jobs_claim_run", after_commit=True)
        run = trigger_now(job)
        pending = (RunStatus.SCHEDULED, RunStatus.RUNNING)
        wait_for(lambda: JobRun.objects.get(pk=run.pk).status not in pending, 30, "the run to end")
    finally:
        cutter.close()
    recorded = JobRun.objects.get(pk=run.pk)
    assert recorded.status == RunStatus.SUCCEEDED, recorded.error
    assert len(log.read_text().splitlines()) == 1 and cutter.cuts == 1
    assert "the cut claim had gone through" in cluster.log_of("node-a")


def test_a_beat_whose_insert_reply_is_cut_publishes_the_slot_at_once(
    cluster: Cluster, cutter: ConnectionCutter, tmp_path: Path
) -> None:
    """The beat's insert of a slot committed and its reply was lost: at its next tick the beat
    publishes that run (jobs.beat.uncertain_slots), instead of leaving it to maintenance's
    re-publish, JOBS_REPUBLISH_AFTER (here 120 s) later."""
    log = tmp_path / "executions.log"
    cluster.start_worker("node-a", concurrency=2)
    # Ready before the first slots: two slots handed to two pool processes at once would run
    # concurrently, and the overlap policy would (rightly) skip one. The job is made once the
    # beat has loaded: slots that pass before any beat runs are (rightly) recorded missed.
    cluster.start_beat(
        "beat-a", env={"DATABASE_URL": _through(cutter), "JOBS_REPUBLISH_AFTER": "120"}
    )
    wait_for(
        lambda: " ready." in cluster.log_of("node-a") and "beat loaded" in cluster.log_of("beat-a"),
        60,
        "the worker ready and the beat loaded",
    )
    job = new_job("every-2s", schedule=Every(2), log=log, queue=cluster.queue, start_deadline=300)
    runs = JobRun.objects.filter(job=job).order_by("scheduled_for")
    wait_for(lambda: runs.filter(status=RunStatus.SUCCEEDED).exists(), 60, "a first run")
    # The slots' insert alone (its unnest's columns): the beat's maintenance thread, on the same
    # connection string, also inserts runs (a lost run's retry), and its cut is not this test's.
    cutter.cut("AS t(job_id, slot, reason)", after_commit=True)
    wait_for(lambda: cutter.cuts == 1, 30, "the beat's insert to be cut")
    # The slot whose insert was cut is among the runs recorded by now, or the next one.
    first = runs.count() + 1

    def first_ended() -> bool:
        head = list(runs[:first])
        pending = (RunStatus.SCHEDULED, RunStatus.RUNNING)
        return len(head) == first and all(run.status not in pending for run in head)

    wait_for(first_ended, 30, "every slot up to the one after the cut to run")
    assert "beat tick failed" in cluster.log_of("beat-a")
    head = list(runs[:first])
    assert {run.status for run in head} == {RunStatus.SUCCEEDED}
    slots = [run.scheduled_for for run in head]
    assert all(b - a == timedelta(seconds=2) for a, b in itertools.pairwise(slots))
    delays = [run.started_at - run.scheduled_for for run in head if run.started_at]
    assert max(delays) < timedelta(seconds=10), delays
    executed = [int(line.split()[0]) for line in log.read_text().splitlines()]
    assert len(executed) == len(set(executed))  # none twice
    assert {run.pk for run in head} <= set(executed)


def test_a_continuous_job_whose_lease_reply_is_cut_starts_without_waiting_for_a_ttl(
    cluster: Cluster, cutter: ConnectionCutter, tmp_path: Path
) -> None:
    """The supervisor's take of a continuous job's lease committed and its reply was lost: the
    node gives that lease back at its next look and starts the job (token 2), well before the
    lease's 30 s would have lapsed."""
    import tests.support.jobs_continuous  # noqa: F401  (registers tests.continuous.step)
    from tests.support.jobs_continuous import read_events

    log = tmp_path / "continuous.log"
    job = new_job(
        "poller", "tests.continuous.step", None, log=log, queue=cluster.queue, lease_ttl=60
    )
    cluster.env.update(
        DATABASE_URL=_through(cutter),
        JOBS_MODULES="tests.support.jobs_under_test,tests.support.jobs_continuous",
        JOBS_NODE_HEARTBEAT="10",  # continuous leases of 30 s
    )
    cutter.cut("expires_at)\nVALUES", after_commit=True)  # lease.acquire's statement
    cluster.start_worker("node-a", concurrency=1)
    wait_for(lambda: cutter.cuts == 1, 90, "the supervisor's first lease take to be cut")
    cut_at = time.monotonic()
    tenures = JobRun.objects.filter(job=job, status=RunStatus.RUNNING)
    wait_for(lambda: tenures.filter(fencing_token=2).exists(), 20, "the job to start")
    assert time.monotonic() - cut_at < 20
    assert "gave back the lease on job:poller" in cluster.log_of("node-a")
    wait_for(lambda: any(e.kind == "step" for e in read_events(log)), 10, "a step")
    assert {event.token for event in read_events(log)} == {2}


def test_the_cutter_relays_unarmed_and_cuts_once(cutter: ConnectionCutter) -> None:
    """The proxy itself: a connection through it works, and an armed cut happens once."""
    import psycopg

    url = _through(cutter)
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    cutter.cut("SELECT 2", after_commit=True)
    with psycopg.connect(url, autocommit=True) as conn, pytest.raises(psycopg.OperationalError):
        conn.execute("SELECT 2")
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT 2").fetchone() == (2,)
    assert cutter.cuts == 1


def test_the_cutter_cuts_a_prepared_statement_after_it_committed(cutter: ConnectionCutter) -> None:
    """psycopg prepares in a round trip of its own: the cut waits for the execution's answer."""
    import psycopg

    url = _through(cutter)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE cut_probe (n integer)")
    try:
        cutter.cut("INSERT INTO cut_probe", after_commit=True)
        with (
            psycopg.connect(url, autocommit=True) as conn,
            pytest.raises(psycopg.OperationalError),
        ):
            conn.execute("INSERT INTO cut_probe VALUES (1)", prepare=True)
        cutter.cut("INSERT INTO cut_probe", after_commit=False)
        with (
            psycopg.connect(url, autocommit=True) as conn,
            pytest.raises(psycopg.OperationalError),
        ):
            conn.execute("INSERT INTO cut_probe VALUES (2)", prepare=True)
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute("SELECT n FROM cut_probe").fetchall() == [(1,)]
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP TABLE cut_probe")
