"""Slot histories of a cluster under test: jobs of ``tests.record`` named by their interval, the
slots of a window, the executions their log counts, and the waits and checks the acceptance
scenarios share (one record per slot, one execution per succeeded run)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.utils import timezone

from jobs.audit import Actor
from jobs.models import Job, JobRun, RunStatus
from jobs.schedule.kinds import Every
from jobs.services import JobDefinition, create_job
from tests.acceptance.conftest import Cluster, wait_for

# Maintenance often, so a lost message is re-published within seconds.
BEAT_ENV = {"JOBS_MAINTENANCE_INTERVAL": "0.5", "JOBS_REPUBLISH_AFTER": "2"}
START_TIMEOUT = 90  # five Python processes starting at once on a small machine


def record_jobs(
    cluster: Cluster, log: Path, specs: Iterable[tuple[str, int]], **policies: object
) -> list[Job]:
    return [
        create_job(
            JobDefinition(
                name=name,
                task="tests.record",
                schedule=Every(seconds),
                kwargs={"log": str(log)},
                policies={"queue": cluster.queue, **policies},
            ),
            actor=Actor.code("tests"),
        )
        for name, seconds in specs
    ]


def wait_started(cluster: Cluster, beats: Iterable[str], workers: Iterable[str]) -> None:
    def started() -> bool:
        return all("beat loaded" in cluster.log_of(name) for name in beats) and all(
            " ready." in cluster.log_of(name) for name in workers
        )

    wait_for(started, timeout=START_TIMEOUT, what="beats loaded and workers ready", poll=0.5)


def wait_until(moment: datetime) -> None:
    wait_for(lambda: timezone.now() >= moment, timeout=120, what=f"{moment.isoformat()}")


def next_second(moment: datetime) -> datetime:
    return moment.replace(microsecond=0) + timedelta(seconds=1)


def grid(seconds: int, start: datetime, end: datetime) -> list[datetime]:
    """The slots of ``Every(seconds)`` in ``[start, end]``."""
    step = timedelta(seconds=seconds)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    first = epoch + -((epoch - start) // step) * step
    return [first + step * i for i in range(int((end - first) / step) + 1)]


def count_executions(log: Path) -> Counter[int]:
    if not log.exists():
        return Counter()
    return Counter(int(line.split()[0]) for line in log.read_text().splitlines() if line)


def count_notes(log: Path) -> Counter[str]:
    """How many lines of the log start with each note (its first word)."""
    lines = log.read_text().splitlines() if log.exists() else []
    return Counter(line.split()[0] for line in lines if line)


def wait_runs_finished(jobs: Iterable[Job], timeout: float, what: str) -> None:
    """Until no run of the jobs is still scheduled or running."""
    jobs = list(jobs)

    def finished() -> bool:
        return not JobRun.objects.filter(
            job__in=jobs, status__in=(RunStatus.SCHEDULED, RunStatus.RUNNING)
        ).exists()

    wait_for(finished, timeout=timeout, what=what)


def runs_in(job: Job, start: datetime, end: datetime) -> list[JobRun]:
    return list(
        JobRun.objects.filter(job=job, scheduled_for__gte=start, scheduled_for__lte=end).order_by(
            "scheduled_for"
        )
    )


def wait_settled(jobs: Iterable[Job], start: datetime, end: datetime, seconds: int) -> None:
    """Until every slot of the window has a record and none is still scheduled or running."""
    jobs = list(jobs)

    def settled() -> bool:
        for job in jobs:
            runs = runs_in(job, start, end)
            if len(runs) < len(grid(interval_of(job), start, end)):
                return False
            if any(run.status in (RunStatus.SCHEDULED, RunStatus.RUNNING) for run in runs):
                return False
        return True

    wait_for(settled, timeout=seconds, what="every slot of the window recorded and finished")


def interval_of(job: Job) -> int:
    """Jobs here are named ``<what>-<interval seconds>-<n>``."""
    return int(job.name.split("-")[1])


def assert_each_slot_once(
    job: Job, start: datetime, end: datetime, executions: Counter[int], seconds: int
) -> list[JobRun]:
    runs = runs_in(job, start, end)
    assert [run.scheduled_for for run in runs] == grid(seconds, start, end), (
        f"{job.name}: not exactly one record per slot"
    )
    for run in runs:
        expected = 1 if run.status == RunStatus.SUCCEEDED else 0
        assert executions[run.pk] == expected, f"{job.name} run {run.pk} ({run.status})"
    return runs
