"""/metrics on a real database: access control, and the series an operator alerts on, read back
with Prometheus's own text parser."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from django.contrib.auth.models import Permission, User
from django.test import Client, override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from jobs.audit import Actor
from jobs.beat import heartbeat
from jobs.conf import get_ops_conf
from jobs.guard import lease
from jobs.models import Job, JobRun, Node, RunStatus
from jobs.upkeep import retention, rollups
from jobs.web import tokens

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def scrape(client: Client) -> Callable[[], dict[str, list[Sample]]]:
    secret = tokens.create("prometheus", actor=Actor.code("tests"))[1]

    def read() -> dict[str, list[Sample]]:
        response = client.get("/metrics", headers={"authorization": f"Bearer {secret}"})
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/plain")
        families = text_string_to_metric_families(response.content.decode())
        return {family.name: family.samples for family in families}

    return read


def value(samples: list[Sample], name: str, **labels: str) -> float | None:
    for sample in samples:
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
            return sample.value
    return None


def _run(job: Job, status: RunStatus, lag: float, duration: float, age_hours: float = 1) -> None:
    slot = timezone.now() - timedelta(hours=age_hours)
    started = slot + timedelta(seconds=lag)
    JobRun.objects.create(
        job=job,
        scheduled_for=slot,
        status=status,
        started_at=started,
        finished_at=started + timedelta(seconds=duration),
    )


def test_metrics_need_a_token_or_an_allowed_address(client: Client) -> None:
    refused = client.get("/metrics")
    assert refused.status_code == 401
    assert client.get("/metrics", headers={"authorization": "Bearer nope"}).status_code == 401

    with override_settings(JOBS_METRICS_ALLOW_FROM=["127.0.0.0/8"]):
        get_ops_conf.cache_clear()
        try:
            allowed = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
            elsewhere = client.get("/metrics", REMOTE_ADDR="10.0.0.1")
        finally:
            get_ops_conf.cache_clear()
    assert allowed.status_code == 200
    assert elsewhere.status_code == 401


def test_a_staff_session_that_may_view_jobs_may_scrape(client: Client) -> None:
    user = User.objects.create_user("ops", password="x", is_staff=True)
    client.force_login(user)
    assert client.get("/metrics").status_code == 401

    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    assert client.get("/metrics").status_code == 200


def test_runs_by_job_and_status_and_histograms(
    scrape: Callable[[], dict[str, list[Sample]]], make_job: Callable[..., Job]
) -> None:
    job = make_job("report")
    _run(job, RunStatus.SUCCEEDED, lag=0.2, duration=2)
    _run(job, RunStatus.SUCCEEDED, lag=3, duration=0.05)
    _run(job, RunStatus.FAILED, lag=0.02, duration=40)
    _run(job, RunStatus.SKIPPED, lag=0.1, duration=0)
    JobRun.objects.create(job=job, scheduled_for=timezone.now())  # scheduled

    metrics = scrape()

    runs = metrics["jobs_runs"]
    assert value(runs, "jobs_runs_total", job="report", status="succeeded") == 2
    assert value(runs, "jobs_runs_total", job="report", status="failed") == 1
    assert value(metrics["jobs_runs_active"], "jobs_runs_active", status="scheduled") == 1
    assert value(metrics["jobs_lease_contention"], "jobs_lease_contention_total") == 1
    lag = metrics["jobs_run_start_lag_seconds"]
    # Skipped runs never ran: three runs in the histograms, not four.
    assert value(lag, "jobs_run_start_lag_seconds_count", job="report") == 3
    assert value(lag, "jobs_run_start_lag_seconds_bucket", job="report", le="0.05") == 1
    assert value(lag, "jobs_run_start_lag_seconds_bucket", job="report", le="0.25") == 2
    assert value(lag, "jobs_run_start_lag_seconds_sum", job="report") == pytest.approx(3.22)
    duration = metrics["jobs_run_duration_seconds"]
    assert value(duration, "jobs_run_duration_seconds_bucket", job="report", le="1.0") == 1
    assert value(duration, "jobs_run_duration_seconds_bucket", job="report", le="+Inf") == 3


def test_counters_do_not_go_down_when_retention_prunes(
    scrape: Callable[[], dict[str, list[Sample]]], make_job: Callable[..., Job]
) -> None:
    job = make_job("report")
    for age in (100, 200, 300):
        _run(job, RunStatus.SUCCEEDED, lag=0.2, duration=2, age_hours=age)
    _run(job, RunStatus.SUCCEEDED, lag=0.2, duration=2, age_hours=1)
    before = scrape()

    pruned = retention.prune(retention={"succeeded": timedelta(days=1)})

    after = scrape()
    assert pruned.deleted == {"succeeded": 3}
    assert JobRun.objects.count() == 1
    for family, sample in (
        ("jobs_runs", "jobs_runs_total"),
        ("jobs_run_start_lag_seconds", "jobs_run_start_lag_seconds_count"),
        ("jobs_run_start_lag_seconds", "jobs_run_start_lag_seconds_sum"),
        ("jobs_run_duration_seconds", "jobs_run_duration_seconds_bucket"),
    ):
        assert value(after[family], sample, job="report") == value(
            before[family], sample, job="report"
        ), sample
    assert value(after["jobs_runs"], "jobs_runs_total", job="report") == 4


def test_leases_nodes_and_beats(
    scrape: Callable[[], dict[str, list[Sample]]], make_job: Callable[..., Job]
) -> None:
    job = make_job("report")
    held = lease.acquire(job.lock_key, "w1@h:1:run-1", ttl=30)
    assert held is not None
    lease.release(held)
    lease.acquire(job.lock_key, "w1@h:1:run-2", ttl=30)
    now = timezone.now()
    Node.objects.create(name="w1@h", host="h", pid=1, started_at=now, last_heartbeat=now)
    Node.objects.create(
        name="w2@h", host="h", pid=2, started_at=now, last_heartbeat=now - timedelta(hours=1)
    )
    recorder = heartbeat.BeatHeartbeatRecorder(interval=0)
    recorder.tick(0.5)
    recorder.tick(0.25)

    metrics = scrape()

    key = job.lock_key
    assert value(metrics["jobs_lease_acquisitions"], "jobs_lease_acquisitions_total", key=key) == 2
    assert value(metrics["jobs_lease_held"], "jobs_lease_held", key=key) == 1
    assert value(metrics["jobs_nodes_live"], "jobs_nodes_live") == 1
    assert value(metrics["jobs_beats_live"], "jobs_beats_live") == 1
    assert value(metrics["jobs_beat_ticks"], "jobs_beat_ticks_total", beat=recorder.name) == 2
    tick_seconds = value(
        metrics["jobs_beat_tick_seconds"], "jobs_beat_tick_seconds_total", beat=recorder.name
    )
    assert tick_seconds == pytest.approx(0.75)
    assert value(metrics["jobs_jobs"], "jobs_jobs", kind="periodic", state="enabled") == 1


def test_folding_changes_no_number_and_counts_each_run_once(
    scrape: Callable[[], dict[str, list[Sample]]], make_job: Callable[..., Job]
) -> None:
    job = make_job("report")
    for hours in range(1, 6):
        _run(job, RunStatus.SUCCEEDED, lag=0.2 * hours, duration=hours, age_hours=hours)
    JobRun.objects.create(job=job, scheduled_for=timezone.now(), status=RunStatus.RUNNING)
    before = rollups.totals()

    assert rollups.fold(batch_size=2) == 5
    assert rollups.fold() == 0

    assert JobRun.objects.filter(folded=False).count() == 1  # the running one waits
    assert sorted(map(_key, rollups.totals())) == sorted(map(_key, before))
    metrics = scrape()
    assert value(metrics["jobs_runs"], "jobs_runs_total", status="succeeded") == 5
    assert value(metrics["jobs_runs_active"], "jobs_runs_active", status="running") == 1


def _key(stats: rollups.Stats) -> tuple[object, ...]:
    return (
        stats.job_id,
        stats.status,
        stats.count,
        tuple(stats.lag.buckets),
        round(stats.lag.total, 6),
        tuple(stats.duration.buckets),
    )


def test_promtool_accepts_the_exposition_and_it_has_every_series_the_rules_use(
    scrape: Callable[[], dict[str, list[Sample]]], client: Client, make_job: Callable[..., Job]
) -> None:
    make_job("j")
    families = scrape()
    secret = tokens.create("promtool", actor=Actor.code("tests"))[1]
    text = client.get("/metrics", headers={"authorization": f"Bearer {secret}"}).content
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is missing: `make test` installs Debian's prometheus"
    result = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, timeout=60, check=False
    )
    assert result.returncode == 0, (result.stdout + result.stderr).decode()
    rules = yaml.safe_load((ROOT / "docker" / "prometheus" / "alerts.yml").read_text())
    used = {
        name
        for group in rules["groups"]
        for rule in group["rules"]
        for name in re.findall(r"\b(jobs_[a-z_]+)", rule["expr"])
    }
    # Every family is exported with its HELP and TYPE, samples or not (a counter as NAME_total).
    exported = {name for family in families for name in (family, f"{family}_total")}
    assert used and used <= exported, used - exported
