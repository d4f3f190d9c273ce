"""Flower keeps the tasks it saw across a restart, started as ``make run`` and compose start it
(``devtools.flower_state_options``): a run's task seen by one Flower process is still listed,
with its outcome, by the next one, which never saw its events."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from devtools.__main__ import flower_state_options
from devtools.services import free_port
from tests.acceptance.conftest import FLOWER_AUTH, Cluster, flower_hears, flower_json, wait_for

pytestmark = pytest.mark.acceptance


def _task_state(port: int, task_id: str) -> str | None:
    info = flower_json(port, f"/api/task/info/{task_id}")
    return None if not isinstance(info, dict) else info.get("state")


def test_flower_lists_the_tasks_it_saw_before_a_restart(cluster: Cluster, tmp_path: Path) -> None:
    options = flower_state_options(tmp_path / "flower.db")
    env = {"FLOWER_BASIC_AUTH": FLOWER_AUTH}
    added = cluster.manage(
        "jobs", "add", "report", "--task", "tests.record", "--every", "1h",
        "--kwargs", json.dumps({"log": str(tmp_path / "executions.log")}),
        "--queue", cluster.queue,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    cluster.start_worker("node-a", concurrency=1)
    port = free_port()
    cluster.start_flower("flower-1", port, options, env)

    # Flower hears the worker (its heartbeat events) before the run starts, so it sees the run.
    wait_for(lambda: flower_hears(port, "node-a"), 60, "Flower receiving the worker's events")
    triggered = cluster.manage("jobs", "run", "report")
    assert triggered.returncode == 0, triggered.stderr
    task_id = f"jobrun-{int(triggered.stdout.strip())}"
    wait_for(
        lambda: _task_state(port, task_id) == "SUCCESS", timeout=60, what="Flower seeing it succeed"
    )

    cluster.kill("flower-1", signal.SIGTERM)  # Flower saves its state as it stops
    assert cluster.processes["flower-1"].wait(timeout=30) == 0, cluster.log_of("flower-1")
    cluster.kill("node-a", signal.SIGTERM)  # no worker left to tell the next Flower anything
    cluster.processes["node-a"].wait(timeout=30)

    port = free_port()
    cluster.start_flower("flower-2", port, options, env)
    wait_for(
        lambda: flower_json(port, "/api/tasks") is not None, timeout=60, what="Flower restarted"
    )
    assert _task_state(port, task_id) == "SUCCESS", cluster.log_of("flower-2")
