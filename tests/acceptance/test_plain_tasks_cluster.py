"""Plain Celery tasks (guarded ones too) as jobs on real processes: two beats (one killed -9
mid-way) and two workers, every slot of every job executed once, counted on the task's own side (a
line per execution in a file), with the runs shown under the job's name (Celery's shadow) and
never sent to the plain task itself."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from jobs import registry
from jobs.audit import Actor
from jobs.models import Job, JobRun, RunStatus
from jobs.schedule.kinds import Every
from jobs.services import JobDefinition, create_job
from tests.acceptance.conftest import Cluster, pause_and_wait_for_beats, wait_for
from tests.support.slot_history import count_notes, wait_runs_finished

pytestmark = pytest.mark.acceptance

START_TIMEOUT = 90
BEAT_ENV = {"JOBS_MAINTENANCE_INTERVAL": "0.5", "JOBS_REPUBLISH_AFTER": "2"}
APPEND = "tests.support.plain_tasks.append"
BOUND = "tests.support.plain_tasks.bound"
GUARDED = "tests.support.plain_tasks.guarded_span"
TESTS = Actor.code("tests")


def _plain_jobs(cluster: Cluster, log: Path) -> list[Job]:
    specs = [(f"append-{n}", APPEND, 1 + n % 2) for n in range(4)]
    specs += [(f"bound-{n}", BOUND, 1 + n % 2) for n in range(2)]
    # A guarded task (base=GuardedTask): its slots are runs like any other's.
    specs += [(f"guarded-{n}", GUARDED, 1 + n % 2) for n in range(2)]
    return [
        create_job(
            JobDefinition(
                name=name,
                task=task,
                schedule=Every(seconds),
                args=[str(log)],
                kwargs={"note": name},
                # Overlap allow: on a busy machine two runs of one job may meet on the two
                # workers, and skip would rightly record one skipped; this is about the beats.
                policies={"queue": cluster.queue, "overlap": "allow"},
            ),
            actor=TESTS,
        )
        for name, task, seconds in specs
    ]


def test_plain_tasks_run_each_slot_once_across_beats_and_a_beat_kill(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "executions.log"
    cluster.start_worker("worker-a")
    cluster.start_worker("worker-b")
    cluster.start_beat("beat-a", env=BEAT_ENV)
    cluster.start_beat("beat-b", env=BEAT_ENV)

    def started() -> bool:
        beats = all("beat loaded" in cluster.log_of(b) for b in ("beat-a", "beat-b"))
        return beats and all(" ready." in cluster.log_of(w) for w in ("worker-a", "worker-b"))

    wait_for(started, timeout=START_TIMEOUT, what="beats loaded and workers ready", poll=0.5)
    jobs = _plain_jobs(cluster, log)
    start = timezone.now()
    wait_for(lambda: timezone.now() > start + timedelta(seconds=8), 30, "8 s of slots")
    cluster.kill("beat-a")
    wait_for(lambda: timezone.now() > start + timedelta(seconds=16), 30, "8 more s of slots")
    pause_and_wait_for_beats(cluster, ["beat-b"], [job.name for job in jobs])

    wait_runs_finished(jobs, timeout=60, what="every run of the plain jobs finished")
    executions = count_notes(log)
    for job in jobs:
        runs = list(JobRun.objects.filter(job=job).order_by("scheduled_for"))
        step = timedelta(seconds=job.periodic_task.interval.every)  # type: ignore[union-attr]
        slots = [run.scheduled_for for run in runs]
        assert len(runs) >= int(14 / step.total_seconds()), f"{job.name}: too few slots ran"
        assert slots == [slots[0] + step * i for i in range(len(slots))], f"{job.name}: a gap"
        assert {run.status for run in runs} == {RunStatus.SUCCEEDED}, job.name
        assert {run.trigger for run in runs} == {"scheduled"}, job.name
        assert executions[job.name] == len(runs), f"{job.name}: executions != runs"
    # Workers got every run through the guarded runner, named as the job, never the task itself.
    worker_logs = cluster.log_of("worker-a") + cluster.log_of("worker-b")
    assert "Task append-0[jobrun-" in worker_logs and "Task bound-1[jobrun-" in worker_logs
    for task in (APPEND, BOUND, GUARDED):
        assert f"Task {task}[" not in worker_logs, task
    assert f"Task {registry.RUN_TASK}[" not in worker_logs
