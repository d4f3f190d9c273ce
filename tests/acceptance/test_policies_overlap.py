"""Issue 4 acceptance: a job slower than its interval, under each overlap policy, on a real beat
and worker. Executions are read from the file the job appends to (start and end of each), runs
from the database: never two executions at once (except under ``allow``), every slot that did
not execute recorded with its reason."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from jobs.audit import Actor
from jobs.models import Job, JobRun, RunStatus
from jobs.schedule.kinds import Every
from jobs.services import JobDefinition, create_job
from tests.acceptance.conftest import Cluster, pause_and_wait_for_beats, wait_for

pytestmark = pytest.mark.acceptance

# (interval s, job duration s, extra policies) per overlap policy
SCENARIOS = {
    "skip": (1, 2.5, {}),
    "allow": (1, 2.5, {}),
    "wait": (2, 3.0, {"start_deadline": 8}),
    # Renewals every ttl/3 = 1 s, so the holder hears a stop request within about a second.
    "replace": (2, 10.0, {"lease_ttl": 3}),
}


def _executions(log: Path) -> list[tuple[int, float, float]]:
    if not log.exists():
        return []
    fields = [line.split() for line in log.read_text().splitlines()]
    return sorted((int(f[0]), float(f[4]), float(f[5])) for f in fields)


def _overlapping(executions: list[tuple[int, float, float]]) -> list[tuple[int, int]]:
    return [
        (a[0], b[0])
        for a, b in itertools.combinations(sorted(executions, key=lambda e: e[1]), 2)
        if b[1] < a[2]
    ]


def _count(job: Job, status: RunStatus) -> int:
    return JobRun.objects.filter(job=job, status=status).count()


@pytest.mark.parametrize("overlap", list(SCENARIOS))
def test_a_job_slower_than_its_interval(cluster: Cluster, tmp_path: Path, overlap: str) -> None:
    log = tmp_path / "executions.log"
    every, seconds, policies = SCENARIOS[overlap]
    job = create_job(
        JobDefinition(
            name=f"slow-{overlap}",
            task="tests.record",
            schedule=Every(every),
            kwargs={"log": str(log), "seconds": seconds},
            policies={"overlap": overlap, "queue": cluster.queue, **policies},
        ),
        actor=Actor.code("tests"),
    )
    cluster.start_worker("node-a", concurrency=4)
    cluster.start_beat("beat-1")

    enough = {
        "skip": lambda: (
            _count(job, RunStatus.SUCCEEDED) >= 2 and _count(job, RunStatus.SKIPPED) >= 3
        ),
        "allow": lambda: len(_overlapping(_executions(log))) >= 2,
        "wait": lambda: _count(job, RunStatus.SUCCEEDED) >= 3,
        "replace": lambda: _count(job, RunStatus.CANCELLED) >= 2,
    }[overlap]
    wait_for(enough, 60, f"the {overlap} scenario to play out")

    # No new slots (paused, the beat stays up: a beat killed between recording a slot and
    # publishing it would leave that run for a maintenance pass no beat is left to make); let
    # every run that started reach its end before judging.
    pause_and_wait_for_beats(cluster, ["beat-1"], [job.name])
    unfinished = (RunStatus.SCHEDULED, RunStatus.RUNNING)
    wait_for(lambda: not JobRun.objects.filter(job=job, status__in=unfinished).exists(), 60, "idle")

    executions = _executions(log)
    runs = {run.pk: run for run in JobRun.objects.filter(job=job)}
    executed = [run_id for run_id, _, _ in executions]
    assert len(executed) == len(set(executed)), "a run executed twice"
    completed = {RunStatus.SUCCEEDED, RunStatus.CANCELLED}
    assert set(executed) == {pk for pk, run in runs.items() if run.status in completed}
    if overlap == "allow":
        assert _overlapping(executions), "allow should let executions overlap"
        assert all(run.fencing_token is None for run in runs.values())
        return
    assert _overlapping(executions) == [], "two executions at once"
    in_time_order = sorted(executions, key=lambda execution: execution[1])
    tokens = [runs[run_id].fencing_token or 0 for run_id, _, _ in in_time_order]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens), "tokens out of order"
    for run in runs.values():
        assert run.status in {*completed, RunStatus.SKIPPED, RunStatus.MISSED}, run.status
        if run.status == RunStatus.SKIPPED:
            assert f"lease {job.lock_key}" in run.error
    if overlap == "skip":
        assert _count(job, RunStatus.SKIPPED) >= 3
    if overlap == "wait":
        lateness = [start - runs[pk].scheduled_for.timestamp() for pk, start, _ in executions]
        assert max(lateness) >= 0.9, "no run waited for the lease"
    if overlap == "replace":
        for run in runs.values():
            if run.status == RunStatus.CANCELLED:
                assert "asked this run to stop" in run.error
