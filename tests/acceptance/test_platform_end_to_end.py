"""Issue 2 acceptance: real beat and worker processes, a job defined through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.models import JobRun, RunStatus
from tests.acceptance.conftest import Cluster, wait_for

pytestmark = pytest.mark.acceptance


def test_a_one_second_job_defined_through_the_cli_runs_on_real_processes(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "executions.log"
    added = cluster.manage(
        "jobs", "add", "tick", "--task", "tests.record", "--every", "1s",
        "--kwargs", json.dumps({"log": str(log)}), "--queue", cluster.queue,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    cluster.start_worker("node-a")
    cluster.start_beat("beat-1")

    def three_succeeded() -> bool:
        return JobRun.objects.filter(job__name="tick", status=RunStatus.SUCCEEDED).count() >= 3

    wait_for(three_succeeded, timeout=60, what="3 succeeded runs of 'tick'")
    runs = list(JobRun.objects.filter(job__name="tick", status=RunStatus.SUCCEEDED))
    slots = [run.scheduled_for for run in runs]
    assert len(slots) == len(set(slots)), "a slot ran twice"
    for run in runs:
        assert run.node.startswith("node-a@")
        assert run.duration is not None and run.duration >= 0
        assert run.fencing_token is not None and run.pid is not None
    executed = log.read_text().splitlines()
    assert {line.split()[0] for line in executed} >= {str(run.pk) for run in runs}
    assert len(executed) == len({line.split()[0] for line in executed}), "a run executed twice"
