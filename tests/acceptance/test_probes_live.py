"""/healthz and /metrics scraped while a real beat and worker run a job: the probe sees the beat
and the node, and the scrape counts the runs they made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from jobs.audit import Actor
from jobs.models import JobRun, RunStatus
from jobs.web import tokens
from tests.acceptance.conftest import Cluster, wait_for

pytestmark = pytest.mark.acceptance


def test_healthz_and_metrics_with_a_live_beat_and_worker(cluster: Cluster, tmp_path: Path) -> None:
    client = Client()
    auth = {"authorization": f"Bearer {tokens.create('prometheus', actor=Actor.code('tests'))[1]}"}
    assert client.get("/healthz").status_code == 503  # nothing runs yet
    added = cluster.manage(
        "jobs", "add", "tick", "--task", "tests.record", "--every", "1s",
        "--kwargs", json.dumps({"log": str(tmp_path / "log")}), "--queue", cluster.queue,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    cluster.start_worker("node-a")
    cluster.start_beat("beat-1")

    def healthy() -> bool:
        return client.get("/healthz").status_code == 200

    wait_for(healthy, timeout=60, what="/healthz to see a live beat and node")
    wait_for(
        lambda: JobRun.objects.filter(job__name="tick", status=RunStatus.SUCCEEDED).count() >= 2,
        timeout=60,
        what="2 succeeded runs",
    )

    assert client.get("/healthz").json() == {"status": "ok"}  # details need credentials
    checks = client.get("/healthz", headers=auth).json()["checks"]
    assert [node["name"].split("@")[0] for node in checks["nodes"]["nodes"]] == ["node-a"]
    assert checks["beats"]["live"] == 1

    scrape = client.get("/metrics", headers=auth)
    assert scrape.status_code == 200
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(scrape.content.decode())
        for sample in family.samples
    }
    succeeded = samples[("jobs_runs_total", (("job", "tick"), ("status", "succeeded")))]
    assert succeeded >= 2
    assert samples[("jobs_run_start_lag_seconds_count", (("job", "tick"),))] >= 2
    assert samples[("jobs_lease_acquisitions_total", (("key", "job:tick"),))] >= 2
    assert samples[("jobs_nodes_live", ())] == 1
    assert samples[("jobs_beats_live", ())] == 1
    ticks = [value for (name, _), value in samples.items() if name == "jobs_beat_ticks_total"]
    assert ticks and ticks[0] > 0
