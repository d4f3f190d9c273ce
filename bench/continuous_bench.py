"""Continuous jobs on real worker processes: takeover after SIGKILL, handoff after SIGTERM, and
what node heartbeats and supervision cost the database.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/jobs \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/5 \\
        .venv/bin/python -m bench.continuous_bench [--kills 20] [--handoffs 10] [--heartbeat 1]

It works in its own database, ``<name of DATABASE_URL's database>_continuous_bench`` on the same
server (created afresh, dropped at the end), and on its own queue of the broker.

- **takeover**: a node holding jobs is SIGKILLed; for each of its jobs, the time until the job's
  function starts again on another node (read from the functions' own log). The bound is
  ``ttl + one supervision period`` with ``ttl = 3 heartbeats``. A fresh node replaces the dead
  one before the next kill.
- **handoff**: the same with SIGTERM (warm shutdown: the job is asked to stop, its lease handed
  back, another node starts it).
- **cost**: with the cluster steady, the transactions the nodes make (``pg_stat_database``,
  read from another database so the reads do not count), per node per minute. The job
  functions make none of their own while idle.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dj_database_url
import psycopg

from bench.databases import admin_url, django_on_fresh_database
from bench.measure import percentile
from bench.processes import wait_until

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Results:
    heartbeat: float
    nodes: int
    jobs: int
    takeovers: list[float] = field(default_factory=list)
    handoffs: list[float] = field(default_factory=list)
    xacts_per_node_minute: float | None = None
    cost_window: float = 0.0
    snapshot_ms: float | None = None
    double_holding: list[str] = field(default_factory=list)

    @property
    def bound(self) -> float:
        from jobs.continuous.supervisor import SUPERVISION_PERIOD

        return 3 * self.heartbeat + SUPERVISION_PERIOD


def _wait(condition: Callable[[], bool], timeout: float, what: str, poll: float = 0.05) -> None:
    wait_until(condition, timeout, f"timed out after {timeout}s waiting for {what}", poll)


class Bench:
    def __init__(self, args: argparse.Namespace, database_url: str, admin_url: str) -> None:
        from tests.acceptance.conftest import Cluster

        self.args = args
        self.admin_url = admin_url
        self.database = dj_database_url.parse(database_url)["NAME"]
        self.tmp = Path(tempfile.mkdtemp(prefix="continuous-bench-"))
        self.log = self.tmp / "executions.log"
        env = dict(os.environ)
        env.update(
            DATABASE_URL=database_url,
            JOBS_MODULES="tests.support.jobs_continuous",
            JOBS_NODE_HEARTBEAT=str(args.heartbeat),
            DJANGO_DEBUG="1",
            DJANGO_SETTINGS_MODULE="project.settings",
            PYTHONPATH=str(ROOT),
        )
        (self.tmp / "logs").mkdir()
        self.cluster = Cluster(
            env=env, queue=f"bench-{uuid.uuid4().hex[:8]}", logs=self.tmp / "logs"
        )
        self.serial = 0
        self.killed: dict[int, float] = {}
        self.results = Results(heartbeat=args.heartbeat, nodes=args.nodes, jobs=args.jobs)

    # --- cluster --------------------------------------------------------------------------

    def start_node(self) -> str:
        self.serial += 1
        name = f"n{self.serial}"
        self.cluster.start_worker(name, concurrency=1)
        return name

    def holdings(self) -> dict[str, list[str]]:
        """Live node name prefix (``n3``) -> job keys it holds, from the lease table."""
        from django.db.models.functions import Now

        from jobs.continuous.supervisor import node_of
        from jobs.models import Lease

        held: dict[str, list[str]] = {}
        for key, holder in Lease.objects.filter(expires_at__gt=Now()).values_list("key", "holder"):
            held.setdefault(node_of(holder).split("@")[0], []).append(key)
        return held

    def balanced(self) -> bool:
        live = [name for name, p in self.cluster.processes.items() if p.poll() is None]
        held = self.holdings()
        counts = [len(held.get(name, [])) for name in live]
        return (
            sum(counts) == self.args.jobs
            and set(held) <= set(live)
            and max(counts) - min(counts) <= 1
        )

    def add_jobs(self) -> None:
        from jobs.audit import Actor
        from jobs.services import JobDefinition, create_job

        for i in range(self.args.jobs):
            create_job(
                JobDefinition(
                    name=f"bench{i}",
                    task="tests.continuous.loop",
                    schedule=None,
                    # Idle functions (no writes of their own), so the cost is the platform's.
                    kwargs={"log": str(self.log), "tick": 3600},
                    policies={"queue": self.cluster.queue},
                ),
                actor=Actor.code("bench"),
            )

    # --- phases ---------------------------------------------------------------------------

    def measure_cost(self) -> None:
        window = self.args.cost_window
        stat = "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            time.sleep(2)  # let every backend flush the stats it holds
            before_row = conn.execute(stat, [self.database]).fetchone()
            started = time.monotonic()
            time.sleep(window)
            # Backends flush their counters at most once a second while busy.
            time.sleep(1.5)
            after_row = conn.execute(stat, [self.database]).fetchone()
            elapsed = time.monotonic() - started - 1.5
        assert before_row is not None and after_row is not None
        per_minute = (after_row[0] - before_row[0]) / (elapsed / 60)
        self.results.xacts_per_node_minute = per_minute / self.args.nodes
        self.results.cost_window = elapsed

        from django.db import connection

        from jobs.continuous.supervisor import _SNAPSHOT

        timings = []
        with connection.cursor() as cursor:
            for _ in range(50):
                started = time.perf_counter()
                cursor.execute(_SNAPSHOT, {"keys": []})
                cursor.fetchall()
                timings.append((time.perf_counter() - started) * 1000)
        self.results.snapshot_ms = statistics.median(timings)

    def fault(self, signum: int, samples: list[float], count: int) -> None:
        for i in range(count):
            _wait(self.balanced, 120, "a balanced cluster")
            # Faults come at random moments, not just after the last placement tick (which
            # would put every fault at the same point of the supervisors' 1 s cycle).
            time.sleep(random.uniform(1.0, 3.0))
            victim, delays = self.fault_once(signum, i)
            samples.extend(delays)
            print(
                f"  {signal.Signals(signum).name} {i + 1}/{count}: {victim} held "
                f"{len(delays)}, running again after " + ", ".join(f"{s:.2f}s" for s in delays),
                flush=True,
            )

    def fault_once(self, signum: int, i: int) -> tuple[str, list[float]]:
        """Signal one node holding jobs; how long until each of its jobs starts elsewhere."""
        held = self.holdings()
        live = [n for n, p in self.cluster.processes.items() if p.poll() is None]
        victim = next(n for n in live[i % len(live) :] + live if held.get(n))
        process = self.cluster.processes[victim]
        jobs = [key.removeprefix("job:") for key in held[victim]]
        at = time.time()
        self.cluster.kill(victim, signum)
        if signum == signal.SIGKILL:
            self.killed[process.pid] = at

        def delays() -> list[float | None]:
            return [self._restarted_after(job, at, process.pid) for job in jobs]

        _wait(
            lambda: None not in delays(),
            timeout=6 * self.results.bound + 30,
            what=f"{jobs} to start again",
        )
        process.wait(60)
        del self.cluster.processes[victim]
        self.start_node()
        return victim, [d for d in delays() if d is not None]

    def _restarted_after(self, job: str, at: float, old_pid: int) -> float | None:
        from tests.support.jobs_continuous import read_events

        for event in read_events(self.log):
            if (event.kind, event.job) == ("start", job) and event.at > at and event.pid != old_pid:
                return event.at - at
        return None

    def check_single_holders(self) -> None:
        from tests.support.jobs_continuous import overlapping_tenures, read_events

        # A killed node's tenures have no end line: they ended when it was killed.
        events = read_events(self.log)
        self.results.double_holding = overlapping_tenures(events, ended_at=self.killed)

    def run(self) -> Results:
        try:
            self.add_jobs()
            for _ in range(self.args.nodes):
                self.start_node()
            _wait(self.balanced, 180, "the first balanced placement")
            print(f"cost: {self.args.cost_window:.0f}s of a steady cluster...", flush=True)
            self.measure_cost()
            print(f"takeover after SIGKILL x{self.args.kills}:", flush=True)
            self.fault(signal.SIGKILL, self.results.takeovers, self.args.kills)
            print(f"handoff after SIGTERM x{self.args.handoffs}:", flush=True)
            self.fault(signal.SIGTERM, self.results.handoffs, self.args.handoffs)
        finally:
            self.cluster.stop_all()
        return self.results


def report(results: Results) -> str:
    def row(name: str, values: list[float], bound: str) -> str:
        if not values:
            return f"| {name} | 0 | - | - | - | - | {bound} |"
        return (
            f"| {name} | {len(values)} | {statistics.median(values):.2f} s "
            f"| {percentile(values, 99):.2f} s | {max(values):.2f} s | {min(values):.2f} s "
            f"| {bound} |"
        )

    lines = [
        f"heartbeat {results.heartbeat:g} s (lease ttl {3 * results.heartbeat:g} s), "
        f"{results.nodes} nodes, {results.jobs} continuous jobs",
        "",
        "| measure | samples | median | p99 | max | min | target |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        row("takeover after SIGKILL", results.takeovers, f"p99 <= {results.bound:g} s"),
        row("handoff after SIGTERM", results.handoffs, "about 1 s, <= 2 s"),
    ]
    if results.xacts_per_node_minute is not None:
        lines += [
            "",
            f"cost: {results.xacts_per_node_minute:.0f} database transactions per node per "
            f"minute (measured over {results.cost_window:.0f} s, {results.jobs} jobs held); "
            f"one supervision snapshot takes {results.snapshot_ms:.2f} ms (median of 50)",
        ]
    lines.append(f"double holding seen in the functions' log: {len(results.double_holding)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.continuous_bench")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--handoffs", type=int, default=10)
    parser.add_argument("--heartbeat", type=float, default=1.0, help="JOBS_NODE_HEARTBEAT (s)")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=6)
    parser.add_argument("--cost-window", type=float, default=60.0, help="seconds")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--keep-logs", action="store_true", help="keep the workers' logs")
    args = parser.parse_args(argv)

    with django_on_fresh_database("_continuous_bench", "tests.support.jobs_continuous") as url:
        bench = Bench(args, url, admin_url(url))
        try:
            results = bench.run()
            bench.check_single_holders()
        finally:
            if args.keep_logs:
                print(f"logs kept in {bench.tmp}")
            else:
                shutil.rmtree(bench.tmp, ignore_errors=True)
    print()
    print(report(results))
    if args.json:
        payload: dict[str, Any] = {**results.__dict__, "bound": results.bound}
        args.json.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
