"""What a beat and a worker hold in ``pg_stat_activity`` (docs/connections.md): each connection
named after its process kind, and no more of them than the documented budget, while runs long
enough to be renewed go on."""

from __future__ import annotations

import collections
import socket
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from jobs.audit import Actor
from jobs.models import JobRun, RunStatus
from jobs.schedule.kinds import Every
from jobs.services import JobDefinition, create_job
from tests.acceptance.conftest import Cluster, live_database_url, wait_for

pytestmark = pytest.mark.acceptance

# docs/connections.md: a beat 3 (tick, maintenance, alerts); a worker's main process 3 (node
# heartbeat, supervisor, alerts); each pool process 1, + 1 (the lease heartbeat) during a run.
BUDGET = {"beat": 3, "worker main": 3, "worker pool": 2 * 2}


def _names(conn: psycopg.Connection[Any]) -> collections.Counter[str]:
    rows = conn.execute(
        "SELECT application_name FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchall()
    return collections.Counter(str(name) for (name,) in rows)


def test_each_process_names_its_connections_and_holds_no_more_than_its_budget(
    cluster: Cluster, tmp_path: Path
) -> None:
    node = f"names@{socket.gethostname()}"
    kinds = {
        "clusterjobs beat": "beat",
        f"clusterjobs worker {node}": "worker main",
        f"clusterjobs worker {node} pool": "worker pool",
    }
    # Runs of 2 s with a 3 s lease: each is renewed once, on the pool process's heartbeat.
    create_job(
        JobDefinition(
            name="renewed",
            task="tests.record",
            schedule=Every(3),
            kwargs={"log": str(tmp_path / "runs.log"), "seconds": 2.0},
            policies={"queue": cluster.queue, "lease_ttl": 3},
        ),
        actor=Actor.code("tests"),
    )
    cluster.start_beat("beat")
    cluster.start_worker("names", concurrency=2)
    peaks: collections.Counter[str] = collections.Counter()
    seen: set[str] = set()
    with psycopg.connect(live_database_url(), autocommit=True) as watcher:

        def sampled() -> bool:
            names = _names(watcher)
            seen.update(names)
            for name, count in names.items():
                kind = kinds.get(name, name)
                peaks[kind] = max(peaks[kind], count)
            return JobRun.objects.filter(status=RunStatus.SUCCEEDED).count() >= 3

        wait_for(sampled, timeout=90, what="three runs", poll=0.05)
        until = time.monotonic() + 3
        while time.monotonic() < until:
            sampled()
            time.sleep(0.05)
    assert set(kinds) <= seen, seen
    assert {kind: peaks[kind] for kind in BUDGET if peaks[kind] > BUDGET[kind]} == {}, peaks
    assert peaks["beat"] >= 1 and peaks["worker main"] >= 1
    assert peaks["worker pool"] >= 2, "a run renewed on its pool process's heartbeat connection"
    assert not JobRun.objects.filter(status=RunStatus.LOST).exists()
    for name in ("beat", "names"):
        log = cluster.log_of(name)
        assert "lease renewal failed" not in log and "lease lost" not in log
