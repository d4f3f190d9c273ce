"""A job's priority means the same on both brokers: 9 runs first, 0 last. Runs of three jobs
(priorities 1, 5 and 9) are published while no worker listens; one worker with one process and a
prefetch of one then runs them, and the order is read from the jobs' own lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.models import JobRun, RunStatus
from tests.acceptance.conftest import Broker, Cluster, wait_for

pytestmark = pytest.mark.acceptance

PRIORITIES = (1, 5, 9)


def test_higher_priority_runs_first_on_each_broker(
    cluster: Cluster, broker: Broker, tmp_path: Path
) -> None:
    cluster.use_broker(broker.url)
    log = tmp_path / "order.log"
    for priority in PRIORITIES:
        added = cluster.manage(
            "jobs", "add", f"prio-{priority}", "--task", "tests.record", "--every", "1h",
            "--kwargs", json.dumps({"log": str(log)}), "--queue", cluster.queue,
            "--priority", str(priority),
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
    # Published lowest first, twice over, so arrival order alone would give the wrong answer.
    priority_of: dict[int, int] = {}
    for _ in range(2):
        for priority in PRIORITIES:
            triggered = cluster.manage("jobs", "run", f"prio-{priority}")
            assert triggered.returncode == 0, triggered.stderr
            priority_of[int(triggered.stdout.strip())] = priority

    cluster.start_worker("worker", concurrency=1)
    wait_for(
        lambda: (
            JobRun.objects.filter(pk__in=priority_of, status=RunStatus.SUCCEEDED).count()
            == len(priority_of)
        ),
        timeout=90,
        what="the six runs",
    )
    order = [priority_of[int(line.split()[0])] for line in log.read_text().splitlines()]
    assert order == [9, 9, 5, 5, 1, 1], f"on {broker.kind}"
