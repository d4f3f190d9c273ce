"""Issue 5 acceptance: the database restarts under a running cluster of continuous jobs.

The workers use a private PostgreSQL (the pgserver wheel, on a unix socket under tmp_path) that
the test stops and starts with pg_ctl, never the machine's shared server. While it is down no
lease can be renewed: every holder must stop before its lease lapses (its local deadline), and
once it is back every job must run again exactly once, with a higher token.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psycopg
import pytest

from tests.acceptance.conftest import Cluster, wait_for
from tests.support.jobs_continuous import (
    Holders,
    Sampler,
    fenced_token_regressions,
    open_tenures,
    overlapping_tenures,
    read_events,
)
from tests.support.private_postgres import PrivatePostgres

pytestmark = pytest.mark.acceptance

HEARTBEAT = 2.0  # leases last 6 s; the local deadline comes 0.6 s before they lapse
JOBS = ["r0", "r1", "r2"]


def _leases(url: str) -> dict[str, tuple[str, int, float]]:
    """key -> (holder, token, expires_at as a Unix time), every row, live or not."""
    with psycopg.connect(url, connect_timeout=2) as conn:
        rows = conn.execute(
            "SELECT key, holder, token, extract(epoch FROM expires_at)::float8 FROM jobs_lease"
        ).fetchall()
    return {key: (holder, int(token), float(expires)) for key, holder, token, expires in rows}


def _live_holders(url: str) -> Holders:
    now = time.time()
    return {
        key: (holder.rsplit(":", 2)[0], token)
        for key, (holder, token, expires) in _leases(url).items()
        if expires > now
    }


def _runs(url: str) -> list[tuple[str, int, str]]:
    with psycopg.connect(url, connect_timeout=2) as conn:
        return [
            (str(key), int(token), str(status))
            for key, token, status in conn.execute(
                "SELECT lease_key, fencing_token, status FROM jobs_jobrun"
            ).fetchall()
        ]


def test_holders_stop_before_their_leases_lapse_and_every_job_runs_again_once(
    cluster: Cluster, tmp_path: Path, private_postgres: PrivatePostgres
) -> None:
    url = private_postgres.url
    log = tmp_path / "continuous.log"
    cluster.env.update(
        DATABASE_URL=url,
        JOBS_MODULES="tests.support.jobs_continuous",
        JOBS_NODE_HEARTBEAT=str(HEARTBEAT),
    )
    migrated = cluster.manage("migrate", "--noinput", "-v", "0")
    assert migrated.returncode == 0, migrated.stderr
    create = "\n".join(
        [
            "from jobs.audit import Actor",
            "from jobs.services import JobDefinition, create_job",
            *(
                f"create_job(JobDefinition(name={name!r}, task='tests.continuous.loop', "
                f"schedule=None, kwargs={{'log': {str(log)!r}}}, "
                f"policies={{'queue': {cluster.queue!r}}}), actor=Actor.code('tests'))"
                for name in JOBS
            ),
        ]
    )
    created = cluster.manage("shell", "-c", create)
    assert created.returncode == 0, created.stderr

    with Sampler(log, lambda: _live_holders(url)) as sampler:
        workers = [cluster.start_worker(name, concurrency=1) for name in "ab"]
        wait_for(
            lambda: len(sampler.latest()) == 3 and len(sampler.per_node()) == 2,
            timeout=90,
            what="3 jobs running on 2 nodes",
        )
        before = sampler.latest()

        down_at = time.time()
        private_postgres.stop()

        def all_stopped() -> bool:
            return not open_tenures(read_events(log))

        wait_for(all_stopped, timeout=3 * HEARTBEAT + 10, what="every holder to stop")

        # Freeze the workers while the database comes back, to read the leases they held.
        for worker in workers:
            sampler.gone(worker.pid)
            worker.send_signal(signal.SIGSTOP)
        try:
            private_postgres.start()
            held = _leases(url)
        finally:
            for worker in workers:
                worker.send_signal(signal.SIGCONT)
                sampler.gone(worker.pid, False)
        events = read_events(log)
        for key, (_, token) in before.items():
            expires_at = held[key][2]
            assert held[key][1] == token, "nobody can have taken a lease while it was down"
            job_name = key.removeprefix("job:")
            (end,) = [e for e in events if (e.kind, e.job, e.token) == ("end", job_name, token)]
            # Not because the function gave up: it kept trying until told to stop.
            assert end.at > down_at + HEARTBEAT
            assert end.at < expires_at, f"{key} stopped {end.at - expires_at:.3f}s after its lapse"

        def all_running_again() -> bool:
            now = sampler.latest()
            running = open_tenures(read_events(log))
            return all(
                key in now
                and now[key][1] > token
                and len(running.get(key.removeprefix("job:"), [])) == 1
                for key, (_, token) in before.items()
            )

        wait_for(all_running_again, timeout=60, what="every job running again")
        settle = len(sampler.samples) + 20  # two more seconds of 100 ms samples
        wait_for(lambda: len(sampler.samples) >= settle, timeout=30, what="more samples")
        assert all(len(tenures) == 1 for tenures in open_tenures(read_events(log)).values())

    runs = _runs(url)
    for key, (_, token) in before.items():
        assert (key, token, "lost") in runs  # recorded by the node that took it over
    events = read_events(log)
    assert sampler.violations == []
    assert fenced_token_regressions(events) == []
    assert overlapping_tenures(events, ended_at={}) == []
