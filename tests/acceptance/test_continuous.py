"""Issue 5 acceptance: continuous jobs on real worker processes.

Workers heartbeat every second, so a continuous job's lease lasts 3 s and a node that misses
3 heartbeats is dead. Ownership is sampled every 100 ms from the lease table and, independently,
from the log the job functions write (tests/support/jobs_continuous.py): no sample may show one job
executing twice, and no fenced write may come from an older token after a newer one.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Collection
from pathlib import Path

import pytest

import tests.support.jobs_continuous  # noqa: F401  (the functions the workers will run)
from devtools.pgbouncer import Pooler
from jobs import services
from jobs.audit import Actor
from jobs.continuous.nodes import Liveness, with_liveness
from jobs.models import JobRun, Node, RunStatus
from tests.acceptance.conftest import Cluster, wait_for
from tests.support.continuous_cluster import (
    STARTUP,
    TAKEOVER_BOUND,
    add_continuous_jobs,
    live_holders,
    node_named,
    use_continuous_jobs,
)
from tests.support.jobs_continuous import (
    FENCED,
    Event,
    Sampler,
    fenced_token_regressions,
    overlapping_tenures,
    read_events,
)

pytestmark = pytest.mark.acceptance


def _one_each(sampler: Sampler, nodes: int, without: str = "") -> bool:
    counts = sampler.per_node()
    return len(counts) == nodes and without not in counts and set(counts.values()) == {1}


def _assert_single_holders(
    sampler: Sampler,
    log: Path,
    ended_at: dict[int, float],
    paused: Collection[tuple[str, int]] = (),
) -> None:
    events = read_events(log)
    assert sampler.violations == []
    assert fenced_token_regressions(events) == []
    assert overlapping_tenures(events, ended_at, paused) == []


def test_six_jobs_balance_over_nodes_fail_over_and_rebalance(
    cluster: Cluster, tmp_path: Path
) -> None:
    _balance_fail_over_and_rebalance(cluster, tmp_path)


def test_continuous_jobs_fail_over_through_pgbouncer_in_transaction_pooling(
    cluster: Cluster, pgbouncer: Pooler, tmp_path: Path
) -> None:
    """The same, every node reaching PostgreSQL through PgBouncer in transaction pooling."""
    cluster.use_pooler(pgbouncer)
    _balance_fail_over_and_rebalance(cluster, tmp_path)


def _balance_fail_over_and_rebalance(cluster: Cluster, tmp_path: Path) -> None:
    log = use_continuous_jobs(cluster, tmp_path)
    keys = add_continuous_jobs(cluster, log, [f"c{i}" for i in range(6)])
    with Sampler(log, live_holders) as sampler:
        workers = {name: cluster.start_worker(name, concurrency=1) for name in "abc"}

        def balanced(expected: int, nodes: int) -> bool:
            counts = sampler.per_node()
            return len(counts) == nodes and set(counts.values()) == {expected}

        wait_for(lambda: balanced(2, 3), timeout=STARTUP, what="2 jobs on each of 3 nodes")
        assert set(sampler.latest()) == set(keys)

        # A 4th node joins: the most loaded nodes hand one job each over, gracefully.
        workers["d"] = cluster.start_worker("d", concurrency=1)

        def rebalanced() -> bool:
            counts = sampler.per_node()
            return len(counts) == 4 and max(counts.values()) <= math.ceil(6 / 4)

        wait_for(rebalanced, timeout=STARTUP, what="the 4th node to get its share")
        d = node_named("d")
        assert sum(sampler.per_node().values()) == 6 and sampler.per_node()[d] >= 1
        handed = JobRun.objects.filter(status=RunStatus.SUCCEEDED, result__ended__icontains=d)
        assert handed.exists()

        # SIGKILL a node holding 2: its jobs run again on the survivors within the bound.
        victim = next(node for node, n in sampler.per_node().items() if n == 2)
        victim_name = victim.split("@")[0]
        orphaned = [key for key, (node, _) in sampler.latest().items() if node == victim]
        pid = workers[victim_name].pid
        sampler.gone(pid)
        killed_at = time.time()
        cluster.kill(victim_name, signal.SIGKILL)
        wait_for(
            lambda: all(sampler.first_held_by_other(k, killed_at, victim) for k in orphaned),
            timeout=TAKEOVER_BOUND + 5,
            what="the killed node's jobs on the survivors",
        )
        takeovers = [sampler.first_held_by_other(k, killed_at, victim) for k in orphaned]
        assert max(t for t in takeovers if t is not None) - killed_at <= TAKEOVER_BOUND
        wait_for(lambda: balanced(2, 3), timeout=30, what="2 jobs on each survivor")
        lost = JobRun.objects.filter(node=victim, status=RunStatus.LOST)
        wait_for(lambda: lost.count() == 2, timeout=10, what="the dead tenures recorded lost")
        assert all("taken over by" in run.error for run in lost)
        # The taker's token is higher than the dead holder's.
        for run in lost:
            assert sampler.latest()[run.lease_key][1] > (run.fencing_token or 0)
    _assert_single_holders(sampler, log, ended_at={pid: killed_at})


def test_sigterm_hands_over_at_once_and_a_paused_holder_is_fenced_out(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = use_continuous_jobs(cluster, tmp_path)
    loop_key, step_key = add_continuous_jobs(cluster, log, ["p0", "p1"])
    with Sampler(log, live_holders) as sampler:
        workers = {name: cluster.start_worker(name, concurrency=1) for name in "ab"}
        wait_for(lambda: _one_each(sampler, 2), timeout=STARTUP, what="one job on each node")
        a = node_named("a")
        (key_a,) = (key for key, (node, _) in sampler.latest().items() if node == a)

        # SIGTERM: ctx.stopping, the function returns, the lease is handed back, b takes over.
        terminated_at = time.time()
        cluster.kill("a", signal.SIGTERM)
        wait_for(
            lambda: sampler.first_held_by_other(key_a, terminated_at, a) is not None,
            timeout=10,
            what="b to take a's job",
        )
        taken_at = sampler.first_held_by_other(key_a, terminated_at, a)
        assert taken_at is not None and taken_at - terminated_at <= 2.0
        workers["a"].wait(30)
        liveness = with_liveness(Node.objects.filter(name=a)).values_list("liveness").get()[0]
        assert liveness == Liveness.STOPPED
        assert not JobRun.objects.filter(node=a, status=RunStatus.RUNNING).exists()
        assert JobRun.objects.filter(node=a, status=RunStatus.SUCCEEDED).exists()

        # A third node takes one job back; then the holder of the long-form job is paused
        # past its lease ttl and the other node takes the job over.
        workers["c"] = cluster.start_worker("c", concurrency=1)
        wait_for(lambda: _one_each(sampler, 2, without=a), timeout=STARTUP, what="b and c")
        holder, old_token = sampler.latest()[loop_key]
        paused = workers[holder.split("@")[0]]
        sampler.gone(paused.pid)
        stopped_at = time.time()
        paused.send_signal(signal.SIGSTOP)
        wait_for(
            lambda: sampler.first_held_by_other(loop_key, stopped_at, holder) is not None,
            timeout=TAKEOVER_BOUND + 5,
            what="the paused node's job on the other node",
        )
        assert sampler.latest()[loop_key][1] > old_token
        resumed_at = time.time()
        paused.send_signal(signal.SIGCONT)

        # Woken, the old tenure finds its lease gone: it stops and its last write is refused.
        def old_tenure() -> list[Event]:
            return [e for e in read_events(log) if e.job == "p0" and e.token == old_token]

        wait_for(
            lambda: any(e.kind == "end" for e in old_tenure()),
            timeout=20,
            what="the woken tenure to stop",
        )
        woken = [e for e in old_tenure() if e.at >= resumed_at]
        assert "rejected" in {e.kind for e in woken}
        assert not [e for e in woken if e.kind in FENCED]
        wait_for(
            lambda: (
                JobRun.objects.get(lease_key=loop_key, fencing_token=old_token).status
                == RunStatus.LOST
            ),
            timeout=20,
            what="the paused tenure recorded lost",
        )
        sampler.gone(paused.pid, False)
        # Exactly one holder of each job afterwards (the woken node may get one back).
        wait_for(lambda: _one_each(sampler, 2, without=a), timeout=30, what="b and c again")

        # Pause: the holder stops its tenure gracefully (cancelled); resume starts it again.
        token_before = sampler.latest()[step_key][1]
        services.pause("p1", actor=Actor.code("tests"))
        wait_for(
            lambda: step_key not in sampler.latest(),
            timeout=15,
            what="the paused job to hand its lease back",
        )
        paused_run = JobRun.objects.get(lease_key=step_key, fencing_token=token_before)
        assert paused_run.status == RunStatus.CANCELLED
        services.resume("p1", actor=Actor.code("tests"))
        wait_for(
            lambda: sampler.latest().get(step_key, ("", 0))[1] > token_before,
            timeout=15,
            what="the resumed job to run again",
        )
    _assert_single_holders(sampler, log, ended_at={}, paused={("p0", old_token)})
