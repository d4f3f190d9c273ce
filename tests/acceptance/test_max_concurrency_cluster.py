"""A concurrency cap with real processes: ten 2-second runs of a job with max_concurrency=3
(overlap wait) on two workers with eight processes between them, two beats running. The job's
own log says never more than three ran at once (and three did); each run held one of the three
leases under a token of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs import services
from jobs.audit import Actor
from jobs.guard import lease
from jobs.models import Job, JobRun, RunStatus, Trigger
from jobs.schedule.kinds import Every
from jobs.services import JobDefinition, create_job
from tests.acceptance.conftest import Cluster, wait_for

pytestmark = pytest.mark.acceptance

RUNS = 10
CAP = 3
BEAT_ENV = {"JOBS_MAINTENANCE_INTERVAL": "0.5", "JOBS_REPUBLISH_AFTER": "2"}


def _most_at_once(log: Path) -> int:
    """The most executions whose [start, end] intervals overlap, from the job's own lines."""
    events = []
    for line in log.read_text().splitlines():
        fields = line.split()
        events += [(float(fields[4]), 1), (float(fields[5]), -1)]
    running = most = 0
    for _, change in sorted(events, key=lambda event: (event[0], event[1])):
        running += change
        most = max(most, running)
    return most


def test_never_more_than_max_concurrency_runs_at_once_each_fenced(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "executions.log"
    job: Job = create_job(
        JobDefinition(
            name="exports",
            task="tests.record",
            schedule=Every(86400),
            enabled=False,  # only the ten triggered runs
            kwargs={"log": str(log), "seconds": 2.0},
            policies={"queue": cluster.queue, "max_concurrency": CAP, "overlap": "wait",
                      "start_deadline": 120},
        ),
        actor=Actor.code("tests"),
    )  # fmt: skip
    for name in ("beat-1", "beat-2"):
        cluster.start_beat(name, env=BEAT_ENV)
    for name in ("worker-1", "worker-2"):
        cluster.start_worker(name, concurrency=4)
    for _ in range(RUNS):
        services.run_now(job.name, actor=Actor.code("tests"))

    wait_for(
        lambda: JobRun.objects.filter(job=job, status=RunStatus.SUCCEEDED).count() == RUNS,
        timeout=120,
        what="the ten runs succeeded",
    )
    assert _most_at_once(log) == CAP
    runs = JobRun.objects.filter(job=job, trigger=Trigger.MANUAL)
    held = list(runs.values_list("lease_key", "fencing_token"))
    assert {key for key, _ in held} <= set(lease.slot_keys("job:exports", CAP))
    assert all(token is not None for _, token in held)
    assert len(set(held)) == RUNS, "two runs held one lease under the same token"
