"""Issue 45 acceptance: a run's own log with real ``celery worker`` processes.

A worker killed -9 in the middle of a run leaves the lines its job logged until about a second
before the kill, readable through the API and the CLI on the run recorded lost; and
``jobs log RUN --follow`` prints each line of a running run within 2 s of the job logging it
(each line carries the time the job logged it, on this same machine's clock), printed lines
included, each once although Celery redirects a worker's stdout into a logger of its own.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.test import Client

from jobs.audit import Actor
from jobs.broker.dispatch import trigger_now
from jobs.guard import lease
from jobs.models import JobRun, RunStatus
from jobs.upkeep.recovery import recover_lost_runs
from jobs.web import tokens
from tests.acceptance.conftest import ROOT, Cluster, wait_for
from tests.support.job_factory import new_job

pytestmark = pytest.mark.acceptance

LINE = re.compile(r"line (\d+) at (\d+\.\d+)")


def _numbers(messages: list[str]) -> list[int]:
    return [int(found.group(1)) for message in messages if (found := LINE.search(message))]


def test_a_worker_killed_mid_run_leaves_the_lines_logged_before(
    cluster: Cluster, tmp_path: Path
) -> None:
    progress = tmp_path / "progress.log"
    job = new_job(
        "talker", "tests.talk", kwargs={"count": 20, "every": 1.0, "log": str(progress)},
        queue=cluster.queue, lease_ttl=3,
    )  # fmt: skip
    cluster.start_worker("node-a", concurrency=1)
    run = trigger_now(job)

    def logged() -> int:
        return len(progress.read_text().splitlines()) if progress.exists() else 0

    wait_for(lambda: logged() >= 10, 90, "the job to log its tenth line")
    cluster.kill("node-a")  # SIGKILL, the whole process group
    assert logged() < 20

    wait_for(
        lambda: lease.current_holder(job.lock_key) is None, 30, "the dead run's lease to lapse"
    )
    recover_lost_runs()
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.LOST

    secret = tokens.create("tests", actor=Actor.code("tests"))[1]
    answer = Client(headers={"authorization": f"Bearer {secret}"}).get(f"/api/runs/{run.pk}/log")
    assert answer.status_code == 200
    body = answer.json()
    assert body["status"] == "lost" and body["finished"] is True
    through_api = _numbers([line["message"] for line in body["lines"]])
    assert through_api[:8] == list(range(1, 9)), through_api
    assert through_api == list(range(1, len(through_api) + 1))  # in order, none doubled

    shown = cluster.manage("jobs", "log", str(run.pk))
    assert shown.returncode == 0, shown.stderr
    assert _numbers(shown.stdout.splitlines()) == through_api


def test_follow_prints_each_line_within_two_seconds_of_its_logging(cluster: Cluster) -> None:
    job = new_job(
        "talker", "tests.talk", kwargs={"count": 10, "every": 1.0, "prints": True},
        queue=cluster.queue,
    )  # fmt: skip
    cluster.start_worker("worker-a", concurrency=1)
    cluster.wait_ready("worker-a", timeout=60)
    run = trigger_now(job)
    arrivals: list[tuple[float, dict[str, object]]] = []
    argv = [
        sys.executable,
        str(ROOT / "manage.py"),
        "jobs",
        "log",
        str(run.pk),
        "--follow",
        "--json",
    ]
    with subprocess.Popen(
        argv, env=cluster.env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as follower:
        out, err = follower.stdout, follower.stderr
        assert out is not None and err is not None

        def read() -> None:
            for text in out:
                arrivals.append((time.time(), json.loads(text)))

        reader = threading.Thread(target=read)
        reader.start()
        try:
            status = follower.wait(timeout=90)
        finally:
            follower.kill()
            reader.join(timeout=10)
        assert status == 0, err.read()
        assert err.read() == f"run {run.pk} succeeded\n"

    assert _numbers([str(record["message"]) for _, record in arrivals]) == list(range(1, 11))
    # The even lines were printed: caught once each, though Celery also redirects the worker's
    # stdout into its own logger.
    assert [record["level"] for _, record in arrivals] == ["INFO", "STDOUT"] * 5
    # Held to the bound: the lines logged once the follower was following (its first line out).
    # Those logged while its process still started (Django's set-up, seconds on a loaded
    # machine) come in its first read, as late as it started.
    following_since = arrivals[0][0]
    followed = 0
    for arrived, record in arrivals:
        found = LINE.search(str(record["message"]))
        assert found is not None
        logged = float(found.group(2))
        assert arrived >= logged
        if logged > following_since:
            followed += 1
            delay = arrived - logged
            assert delay < 2.0, f"line {found.group(1)} printed {delay:.2f} s after it was logged"
    assert followed >= 3, "the follower started too late to follow three lines"
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED
