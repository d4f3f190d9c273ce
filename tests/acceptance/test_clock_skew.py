"""Issue 10 acceptance: the failure model's clock row at ±2 minutes, on real processes whose
wall clocks really are skewed (Debian's libfaketime; ``make test`` installs ``faketime``).

Beats fire by the database's clock (``jobs.beat.clock``), so a beat 2 minutes ahead starts no run
early and one 2 minutes behind none late; workers decide by the database's clock and by
monotonic intervals only, so their skew changes neither the runs nor a continuous job's takeover.
Run times are read from the database (``scheduled_for`` is the slot, ``started_at`` the claim's
``now()``); the test process's own clock is the machine's real one.
"""

from __future__ import annotations

import glob
import os
import re
import signal
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from jobs.models import JobRun, RunStatus
from tests.acceptance.conftest import ROOT, Cluster, wait_for
from tests.support.continuous_cluster import (
    STARTUP,
    TAKEOVER_BOUND,
    add_continuous_jobs,
    live_holders,
    node_named,
    use_continuous_jobs,
)
from tests.support.jobs_continuous import Sampler
from tests.support.slot_history import (
    BEAT_ENV,
    assert_each_slot_once,
    count_executions,
    next_second,
    record_jobs,
    wait_settled,
    wait_started,
    wait_until,
)

pytestmark = pytest.mark.acceptance

SKEW = 120  # seconds
SHIM = Path(__file__).resolve().parent / "faketime"
# How early a run may start by the database's clock: none. The beat's estimate of that clock is
# a lower bound (jobs.beat.clock); 1 ms covers the clocks' microsecond resolution and any drift
# between the machine's clock and PostgreSQL's within one refresh period (none on one machine).
EARLY_TOLERANCE = timedelta(milliseconds=1)
# How late: no later than maintenance would re-publish a run whose message went astray
# (BEAT_ENV's JOBS_REPUBLISH_AFTER): a run started before that was started from its beat's own
# publish, a tick (0.2 s here), the publish and the claim after its slot by the database's clock,
# however busy the machine (a loaded 2-core run measured 1.44 s). A beat firing by its own clock
# would start runs 2 minutes late (or early), a worker holding messages by its own clock as late.
LATE_TOLERANCE = timedelta(seconds=float(BEAT_ENV["JOBS_REPUBLISH_AFTER"]))


def skewed(seconds: int) -> dict[str, str]:
    """The environment that runs a process with its wall clock ``seconds`` off."""
    libraries = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not libraries:
        pytest.fail("Debian's faketime is not installed (make test installs it when missing)")
    return {
        "LD_PRELOAD": libraries[0],
        "FAKETIME": f"{seconds:+d}",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "PYTHONPATH": f"{SHIM}{os.pathsep}{ROOT}",
    }


def _clock_of(cluster: Cluster, name: str, started_at: float) -> float:
    """How far ahead of this machine's clock the process's clock runs, in seconds, from the first
    time stamp it logged (a few seconds after ``started_at``, when it was started)."""
    stamp = re.search(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", cluster.log_of(name), re.M)
    assert stamp is not None, f"{name} logged no time stamp"
    return datetime.fromisoformat(stamp.group(1)).timestamp() - started_at


def test_beats_and_workers_two_minutes_apart_run_each_slot_once_and_on_time(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Two beats (+2 min, -2 min) and two workers (+2 min, -2 min), 4 jobs every second and
    2 every 2 seconds, for 20 s."""
    log = tmp_path / "executions.log"
    skews = {"worker-ahead": SKEW, "beat-ahead": SKEW, "worker-behind": -SKEW, "beat-behind": -SKEW}
    started_at = time.time()
    for name, skew in skews.items():
        if name.startswith("worker"):
            cluster.start_worker(name, env=skewed(skew))
        else:
            cluster.start_beat(name, env={**BEAT_ENV, **skewed(skew)})
    beats, workers = ["beat-ahead", "beat-behind"], ["worker-ahead", "worker-behind"]
    wait_started(cluster, beats, workers)
    specs = [(f"tick-1-{n}", 1) for n in range(4)] + [(f"tick-2-{n}", 2) for n in range(2)]
    # Overlap allow, as in the three-beat test: on a loaded machine two runs of one job may meet
    # on the two workers and overlap skip would rightly record one skipped; this is about clocks.
    jobs = record_jobs(cluster, log, specs, overlap="allow")
    start = next_second(timezone.now()) + timedelta(seconds=2)
    wait_until(start + timedelta(seconds=20))
    end = start + timedelta(seconds=18)
    wait_settled(jobs, start, end, seconds=60)

    executions = count_executions(log)
    for job, (_, seconds) in zip(jobs, specs, strict=True):
        runs = assert_each_slot_once(job, start, end, executions, seconds)
        assert {run.status for run in runs} == {RunStatus.SUCCEEDED}, job.name
        for run in runs:
            assert run.started_at is not None
            lag = run.started_at - run.scheduled_for
            assert -EARLY_TOLERANCE <= lag <= LATE_TOLERANCE, (job.name, run.pk, lag)
    # Both skewed beats fired slots and both skewed workers ran them.
    for beat in beats:
        assert "created here" in cluster.log_of(beat)
    # The window's runs (all ended): slots after it keep coming, and one not yet taken has no
    # node.
    window = JobRun.objects.filter(job__in=jobs, scheduled_for__gte=start, scheduled_for__lte=end)
    nodes = set(window.values_list("node", flat=True))
    assert {node.split("@")[0] for node in nodes} == set(workers)
    # And their clocks were skewed indeed (start-up on a busy machine takes up to ~30 s).
    for name, skew in skews.items():
        assert 0 <= _clock_of(cluster, name, started_at) - skew < 40, f"{name} is not {skew:+d} s"


def test_a_continuous_job_is_taken_over_within_the_bound_between_skewed_nodes(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Two continuous jobs on node a (+2 min) and node b (-2 min), one each. a is killed -9:
    b (behind) takes its job over; then c (+2 min) joins, takes one job, and b is killed -9:
    c (ahead) takes its job over. Each within the bound of the unskewed tests."""
    log = use_continuous_jobs(cluster, tmp_path)
    add_continuous_jobs(cluster, log, ["s0", "s1"])
    with Sampler(log, live_holders) as sampler:

        def one_each(*names: str) -> bool:
            counts = sampler.per_node()
            on = sorted(node.split("@")[0] for node in counts)
            return on == sorted(names) and set(counts.values()) == {1}

        def takeover(victim: str, survivor: str) -> float:
            """Kill ``victim`` -9; seconds until ``survivor`` holds its job."""
            node = node_named(victim)
            (orphan,) = (key for key, (holder, _) in sampler.latest().items() if holder == node)
            sampler.gone(cluster.processes[victim].pid)
            killed_at = time.time()
            cluster.kill(victim, signal.SIGKILL)
            wait_for(
                lambda: sampler.first_held_by_other(orphan, killed_at, node) is not None,
                timeout=TAKEOVER_BOUND + 5,
                what=f"{victim}'s job on {survivor}",
            )
            taken_at = sampler.first_held_by_other(orphan, killed_at, node)
            assert taken_at is not None and sampler.latest()[orphan][0] == node_named(survivor)
            return taken_at - killed_at

        cluster.start_worker("a", concurrency=1, env=skewed(SKEW))
        cluster.start_worker("b", concurrency=1, env=skewed(-SKEW))
        wait_for(lambda: one_each("a", "b"), timeout=STARTUP, what="one job on a and one on b")
        behind_took = takeover("a", "b")
        cluster.start_worker("c", concurrency=1, env=skewed(SKEW))
        wait_for(lambda: one_each("b", "c"), timeout=STARTUP, what="c to take one job")
        ahead_took = takeover("b", "c")
        assert sampler.violations == []
    assert behind_took <= TAKEOVER_BOUND and ahead_took <= TAKEOVER_BOUND, (behind_took, ahead_took)
