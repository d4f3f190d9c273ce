"""Flower tells what the run records say (issue 11), read from Flower's own ``/api/tasks`` with
a real worker sending events: a failing job's run is a FAILURE with the job's exception; a
skipped run is no plain SUCCESS; a run recorded lost after its worker was killed is a FAILURE,
not left STARTED; a job named apart from its function shows under the job's name."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from devtools.__main__ import flower_state_options
from devtools.services import free_port
from jobs.broker.dispatch import trigger_now
from jobs.models import JobRun, RunStatus
from jobs.schedule.kinds import At
from tests.acceptance.conftest import FLOWER_AUTH, Cluster, flower_hears, flower_json, wait_for
from tests.support.job_factory import new_job

pytestmark = pytest.mark.acceptance

# Never due: these jobs run only when the test triggers them.
NEVER = At(datetime(2100, 1, 1, tzinfo=UTC))
# The beat here only does maintenance (recording the killed worker's run lost), often.
BEAT_ENV = {"JOBS_MAINTENANCE_INTERVAL": "0.5"}


def _flower_task(port: int, run: JobRun) -> dict[str, Any]:
    """The run's task as ``/api/tasks`` lists it (empty until Flower has heard of it)."""
    tasks = flower_json(port, "/api/tasks")
    task = tasks.get(f"jobrun-{run.pk}") if isinstance(tasks, dict) else None
    return task if isinstance(task, dict) else {}


def _status(run: JobRun) -> str:
    return JobRun.objects.get(pk=run.pk).status


def test_flower_shows_failed_skipped_and_lost_runs_as_recorded(
    cluster: Cluster, tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    hold.touch()
    failing = new_job("nightly-failure", "tests.fail", NEVER, queue=cluster.queue)
    holding = new_job(
        "holder", "tests.hold", NEVER, kwargs={"hold": str(hold)},
        log=tmp_path / "executions.log", queue=cluster.queue, lease_ttl=3,
    )  # fmt: skip
    port = free_port()
    cluster.start_flower(
        "flower",
        port,
        flower_state_options(tmp_path / "flower.db"),
        {"FLOWER_BASIC_AUTH": FLOWER_AUTH},
    )
    cluster.start_worker("node-a", concurrency=2)
    cluster.start_beat("beat", env=BEAT_ENV)
    wait_for(lambda: flower_hears(port, "node-a"), 60, "Flower receiving the worker's events")

    # A job that raises: the run is recorded failed, and its task is a FAILURE carrying the
    # job's exception and traceback, under the job's name rather than its function's.
    failed = trigger_now(failing)
    wait_for(lambda: _flower_task(port, failed).get("state") == "FAILURE", 60, "a FAILURE")
    assert _status(failed) == RunStatus.FAILED
    task = _flower_task(port, failed)
    assert "ValueError: boom from tests.fail" in task["exception"], task
    assert "RunFailed" in task["exception"], task
    assert 'raise ValueError("boom from tests.fail")' in task["traceback"], task
    assert task["name"] == "nightly-failure", task

    # A run that finds its job's lease held is recorded skipped; Flower's result says so.
    running = trigger_now(holding)
    wait_for(lambda: _status(running) == RunStatus.RUNNING, 60, "the holder running")
    skipped = trigger_now(holding)
    wait_for(lambda: _status(skipped) == RunStatus.SKIPPED, 60, "the second run skipped")
    wait_for(lambda: "result" in _flower_task(port, skipped), 60, "Flower seeing the skip")
    task = _flower_task(port, skipped)
    assert task["state"] == "SUCCESS", task
    assert "'status': 'skipped'" in task["result"], task
    assert f"lease {holding.lock_key} held by node-a@" in task["result"], task
    assert task["name"] == "holder", task

    # The worker dies mid-run: its lease lapses, maintenance records the run lost and tells
    # Flower on the dead worker's behalf, so the task does not stay STARTED.
    assert _flower_task(port, running).get("state") == "STARTED"
    cluster.kill("node-a")
    wait_for(lambda: _status(running) == RunStatus.LOST, 60, "maintenance recording it lost")
    wait_for(lambda: _flower_task(port, running).get("state") == "FAILURE", 30, "a FAILURE")
    task = _flower_task(port, running)
    assert "RunLost" in task["exception"] and "lapsed" in task["exception"], task
    assert str(task["worker"]).startswith("node-a@"), task

    # The failure was Celery's ordinary, expected one: acknowledged, never redelivered.
    worker_log = cluster.log_of("node-a")
    assert f"nightly-failure[jobrun-{failed.pk}] raised expected: RunFailed(" in worker_log
    assert "raised unexpected" not in worker_log
    assert JobRun.objects.get(pk=failed.pk).duplicate_deliveries == 0
