"""Backfill with real processes: a day of 1-minute slots backfilled from two terminals at once
makes 1,440 runs, none twice; two beats and a worker, killed with SIGKILL halfway and replaced,
then run them one at a time, oldest first: every slot executes at most once, never two at once,
and each ends in a visible state."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobs.models import Job, JobRun, RunStatus, Trigger
from jobs.schedule.kinds import Every
from tests.acceptance.conftest import ROOT, Cluster, wait_for
from tests.support.job_factory import new_job

pytestmark = pytest.mark.acceptance

BEAT_ENV = {"JOBS_MAINTENANCE_INTERVAL": "0.5", "JOBS_REPUBLISH_AFTER": "2"}
SLOTS = 1440


def _backfill_from_two_terminals(cluster: Cluster, since: datetime, until: datetime) -> list[int]:
    argv = [
        sys.executable, str(ROOT / "manage.py"), "jobs", "backfill", "minutely",
        "--since", since.isoformat(), "--until", until.isoformat(), "--json",
    ]  # fmt: skip
    terminals = [
        subprocess.Popen(argv, env=cluster.env, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    created = []
    for terminal in terminals:
        out, _ = terminal.communicate(timeout=60)
        assert terminal.returncode == 0
        created.append(json.loads(out)["created"])
    return created


def _backfilled(job: Job, status: RunStatus) -> int:
    return JobRun.objects.filter(job=job, trigger=Trigger.BACKFILL, status=status).count()


def test_a_day_backfilled_twice_at_once_runs_each_slot_once_one_at_a_time(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "executions.log"
    # wait: the beats' own slots of today queue behind a backfill run, never skip it.
    job = new_job(
        "minutely", schedule=Every(60), log=log, queue=cluster.queue, overlap="wait", lease_ttl=3
    )
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(1)

    created = _backfill_from_two_terminals(cluster, day, day + timedelta(minutes=SLOTS - 1))
    assert sum(created) == SLOTS, f"the two backfills made {created}"
    slots = list(
        JobRun.objects.filter(job=job, trigger=Trigger.BACKFILL).values_list(
            "scheduled_for", flat=True
        )
    )
    assert sorted(slots) == [day + timedelta(minutes=m) for m in range(SLOTS)]

    for name in ("beat-1", "beat-2"):
        cluster.start_beat(name, env=BEAT_ENV)
    cluster.start_worker("worker-1")
    wait_for(
        lambda: _backfilled(job, RunStatus.SUCCEEDED) >= SLOTS // 3,
        timeout=120,
        what="a third of the backfill",
    )
    cluster.kill("worker-1")
    cluster.start_worker("worker-2")
    ended = (RunStatus.SUCCEEDED, RunStatus.LOST, RunStatus.SKIPPED, RunStatus.MISSED)
    wait_for(
        lambda: (
            JobRun.objects.filter(job=job, trigger=Trigger.BACKFILL, status__in=ended).count()
            == SLOTS
        ),
        timeout=240,
        what="every backfill run ended",
    )

    runs = JobRun.objects.filter(job=job, trigger=Trigger.BACKFILL)
    assert runs.count() == SLOTS
    # The worker killed mid-run loses at most the run it held (on_lost=abandon); every other
    # slot succeeded.
    assert _backfilled(job, RunStatus.SUCCEEDED) >= SLOTS - 1
    executions = [line.split() for line in log.read_text().splitlines()]
    backfill_ids = set(runs.values_list("pk", flat=True))
    executed = [line for line in executions if int(line[0]) in backfill_ids]
    executed_slots = [line[1] for line in executed]
    assert len(executed_slots) == len(set(executed_slots)), "a slot ran twice"
    # One at a time: each execution starts after the one before it ended, in slot order.
    by_start = sorted(executed, key=lambda line: float(line[4]))
    for before, after in itertools.pairwise(by_start):
        assert float(after[4]) >= float(before[5]), "two backfill runs overlapped"
        assert after[1] > before[1], "a backfill run went before an older slot"
