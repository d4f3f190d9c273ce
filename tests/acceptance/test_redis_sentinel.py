"""Redis behind Sentinel: the primary killed mid-run, the replica promoted, every slot one run.

A Redis primary, one replica and three sentinels of the test's own (quorum 2, the primary down
after 1 s without an answer), on free loopback ports; two beats and two workers on the
sentinels' URL (``sentinel://…;sentinel://…;sentinel://…`` with
``JOBS_BROKER_SENTINEL_MASTER``). Jobs due every 1 and 2 s, and two bursts of 150 slots due at
once (the bulk path, ``dispatch.BURST_OVER``): one before the kill, one after the failover.
Just before the first burst the replica is frozen and its link closed on the primary, so what
the primary acknowledges from then on is certain to be lost with it; once a beat has published
the burst, the primary is killed (SIGKILL), the replica resumed and promoted by the sentinels,
and the killed node comes back as a replica of the new primary; the cluster goes on for several
more slots.

Replication is asynchronous: what the old primary acknowledged and had not yet sent to its
replica is gone with it (messages of runs recorded in the database). Maintenance re-publishes
those runs after ``JOBS_REPUBLISH_AFTER``: a slot may run late, never twice and never not at all.
Executions are counted independently of the run table (``tests.record`` appends a line per
execution).
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.db import transaction
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from bench.beat_bench import create_jobs
from jobs.broker import messages
from jobs.broker.dispatch import BURST_OVER
from jobs.models import Job, JobRun, RunStatus
from tests.acceptance.conftest import Cluster, wait_for
from tests.support.redis_sentinel import MASTER_NAME, SentinelSet, sentinel_set
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

BEATS = ("beat-1", "beat-2")
WORKERS = ("worker-a", "worker-b")
BURST = 150
KILL_AT = 10  # seconds after the window's start
# The second burst's slot: after the failover, and after the beats' reconnecting (Celery's own
# backoff, 2 s then 4 s more: 8.5 s after the promotion in a loaded CI run).
AFTER_BURST_AT = 30
WINDOW = 46  # seconds of slots checked
# From this long after the promotion every slot is published by a beat on time.
RECONNECTED_AFTER = timedelta(seconds=12)
FAILOVER_TIMEOUT = 30  # the sentinels agreeing on the replica, on a busy machine
LATE = timedelta(seconds=1)  # a run published this long after its slot was re-published


def _bursts(cluster: Cluster, log: Path, slots: dict[str, datetime]) -> dict[str, list[Job]]:
    """``BURST`` jobs per prefix, each with one slot at ``slots[prefix]`` (in bulk, as the beat
    benchmark makes them: the services take ~20 ms a job)."""
    made = {}
    with transaction.atomic():
        for prefix, slot in slots.items():
            create_jobs(
                BURST, queue=cluster.queue, task="tests.record", every=lambda n: 3600,
                anchor=timezone.now() + timedelta(days=1), prefix=prefix,
                kwargs=lambda n: {"log": str(log)},
            )  # fmt: skip
            made[prefix] = list(Job.objects.filter(name__startswith=f"{prefix}-"))
            PeriodicTask.objects.filter(job__in=made[prefix]).update(start_time=slot)
    return made


def _burst_published(cluster: Cluster) -> bool:
    """Whether a beat's log says it created and published a whole burst in one tick."""
    return any(
        int(created) >= BURST and int(published) >= BURST
        for beat in BEATS
        for created, published in re.findall(
            r"(\d+) created here, (\d+) published", cluster.log_of(beat)
        )
    )


def _republished(cluster: Cluster) -> int:
    return sum(
        int(n)
        for beat in BEATS
        for n in re.findall(r"re-published (\d+) run", cluster.log_of(beat))
    )


def test_a_redis_primary_killed_mid_run_fails_over_with_every_slot_run_once(
    cluster: Cluster, tmp_path: Path
) -> None:
    assert BURST > BURST_OVER, "the bursts must take the bulk path"
    with sentinel_set(tmp_path / "redis") as nodes:
        wait_for(nodes.ready, 60, "the sentinels seeing the replica and each other")
        assert nodes.master_port() == nodes.primary_port
        _run_through_a_failover(cluster, nodes, tmp_path)


def _run_through_a_failover(cluster: Cluster, nodes: SentinelSet, tmp_path: Path) -> None:
    cluster.use_broker(nodes.url)
    cluster.env["JOBS_BROKER_SENTINEL_MASTER"] = MASTER_NAME
    log = tmp_path / "executions.log"
    for name in WORKERS:
        cluster.start_worker(name)
    for name in BEATS:
        cluster.start_beat(name, env=BEAT_ENV)
    wait_started(cluster, BEATS, WORKERS)
    for name in WORKERS:
        assert "sentinel://" in cluster.log_of(name), f"{name} is not on the sentinels"

    # Overlap allow: two runs of one job may meet on the two workers on a busy machine, and
    # this test is about the broker.
    specs = [(f"tick-1-{n}", 1) for n in range(4)] + [(f"tick-2-{n}", 2) for n in range(4)]
    start = next_second(timezone.now()) + timedelta(seconds=8)
    bursts = _bursts(
        cluster,
        log,
        {
            "before": start + timedelta(seconds=KILL_AT),
            "after": start + timedelta(seconds=AFTER_BURST_AT),
        },
    )
    jobs = record_jobs(cluster, log, specs, overlap="allow")
    assert timezone.now() < start, "jobs made too slowly for the window"

    # The replica stops hearing the primary (its link cut, the replica frozen) just before the
    # first burst; once a beat has published the burst (the primary acknowledged every
    # message), the primary is killed with the messages the workers had not taken yet.
    wait_until(start + timedelta(seconds=KILL_AT - 2))
    nodes.pause_replica()
    cut = timezone.now()
    wait_for(lambda: _burst_published(cluster), 30, "a beat publishing the first burst", poll=0.01)
    held = nodes.waiting_on_primary(cluster.queue)
    nodes.kill_primary()
    killed_at, killed = time.monotonic(), timezone.now()
    nodes.resume_replica()
    wait_for(
        lambda: nodes.master_port() == nodes.replica_port,
        FAILOVER_TIMEOUT,
        "the sentinels promoting the replica",
        poll=0.05,
    )
    failover_seconds = time.monotonic() - killed_at
    promoted = timezone.now()
    nodes.restart_old_primary_as_replica(nodes.replica_port)
    assert promoted < start + timedelta(seconds=AFTER_BURST_AT - 2), "failover too slow to test"

    end = start + timedelta(seconds=WINDOW)
    wait_until(end + timedelta(seconds=1))
    wait_settled(jobs, start, end, seconds=90)
    every_burst = [job for made in bursts.values() for job in made]
    wait_for(
        lambda: (
            JobRun.objects.filter(job__in=every_burst, status=RunStatus.SUCCEEDED).count()
            == len(every_burst)
        ),
        90,
        "every run of both bursts succeeded",
    )

    executions = count_executions(log)
    assert max(executions.values()) == 1, "a run executed twice"
    ticks = []
    for job, (_, seconds) in zip(jobs, specs, strict=True):
        runs = assert_each_slot_once(job, start, end, executions, seconds)
        assert {run.status for run in runs} == {RunStatus.SUCCEEDED}, job.name
        ticks += runs
    burst_runs = list(JobRun.objects.filter(job__in=every_burst))
    assert len(burst_runs) == len(every_burst), "one run per burst job's slot"
    assert all(executions[run.pk] == 1 for run in burst_runs), "a burst run not executed once"
    # The bursts took the bulk path: for each, one beat created and published it in one tick.
    beat_logs = "".join(cluster.log_of(beat) for beat in BEATS)
    whole = [
        (int(created), int(published))
        for created, published in re.findall(r"(\d+) created here, (\d+) published", beat_logs)
        if int(created) >= BURST
    ]
    assert len(whole) == 2, f"the bursts were not each fired in one tick: {whole}"
    assert whole[-1][1] >= BURST, "the burst after the failover was not published at once"

    # Beats and workers follow the new primary: the slots after the failover were published
    # straight away by a beat (not only re-published by maintenance) and every worker ran some.
    settled_from = promoted + RECONNECTED_AFTER
    later = [run for run in ticks if run.scheduled_for >= settled_from]
    later += [run for run in burst_runs if run.scheduled_for >= settled_from]
    assert later, "no slot after the failover"
    assert {run.node.split("@")[0] for run in later} == set(WORKERS)
    for run in later:
        assert run.dispatched_at is not None
        assert run.dispatched_at - run.scheduled_for < timedelta(seconds=2), (
            f"run {run.pk} ({run.job.name}) published {run.dispatched_at - run.scheduled_for} "
            "after its slot: the beats did not publish to the new primary"
        )
    assert nodes.linked_to_master(nodes.primary_port), "the killed node is not a replica again"
    for name in (*BEATS, *WORKERS):
        assert cluster.processes[name].poll() is None, f"{name} exited:\n{cluster.log_of(name)}"

    # The messages the dead primary held were lost with it (its replica never had them): each
    # one's run was re-published by maintenance, and ran late, once.
    # (A message published before the cut may have reached the replica: those of later slots.)
    held_runs = JobRun.objects.filter(pk__in=[messages.run_id_of(task_id) for task_id in held])
    assert held_runs.count() == len(held)
    lost = held_runs.filter(scheduled_for__gt=cut)
    assert lost.count() >= BURST // 2, "the workers had taken most of the burst before the kill"
    for run in lost:
        assert run.status == RunStatus.SUCCEEDED and executions[run.pk] == 1, run.pk
        assert run.dispatched_at is not None and run.dispatched_at > run.scheduled_for + LATE, (
            f"run {run.pk} not re-published"
        )
    republished = _republished(cluster)
    lateness = max(
        (run.started_at - run.scheduled_for).total_seconds()
        for run in lost
        if run.started_at is not None
    )
    print(
        f"\nslots checked: {len(ticks)} ticks + {len(burst_runs)} burst runs; primary killed at "
        f"{killed.isoformat()} holding {len(lost)} message(s) its replica never had; replica "
        f"promoted after {failover_seconds:.2f} s; runs re-published by maintenance: "
        f"{republished} (with every lost one: the latest started {lateness:.1f} s after its slot)"
    )
