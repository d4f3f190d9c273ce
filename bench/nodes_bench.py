"""What continuous-job supervision costs the database as the cluster grows, and where it goes.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/jobs \\
        .venv/bin/python -m bench.nodes_bench [--nodes 100,300,1000] [--jobs 1000,3000] \\
            [--threads 80] [--seconds 20]

In a database of its own (``<DATABASE_URL's database>_nodes_bench``), for each size (N live
nodes, J continuous jobs each holding its lease, spread over the nodes):

- the three statements every node makes, each timed ``--samples`` times on one connection
  (median, p99): the supervision snapshot (``jobs.continuous.supervisor._SNAPSHOT``, once a
  second per node), the node heartbeat (once per ``JOBS_NODE_HEARTBEAT``) and a lease renewal
  (each held job, every ttl/3), with the snapshot's size;
- the projection: statements per second of the whole cluster and the database time they take
  (N x per-node rate x median), which for the snapshot grows as N x (J + N);
- a simulation: ``--threads`` threads, each a node with its own connection issuing its real
  statements at their real rates for ``--seconds``, reporting the statements per second the
  server sustained and how late the nodes' supervision ticks ran (a tick is due every second);
- takeover (``--takeover-jobs``): the same threads, each now a supervisor in miniature: each
  tick it reads the real snapshot, computes the real plan (``jobs.continuous.placement``),
  acquires with the real statement the free jobs planned for it and renews what it holds,
  waking early at the lapses the snapshot announced, as ``jobs.continuous.supervisor`` does.
  Once the cluster is settled a tenth of the nodes stop dead (no more statements: a SIGKILL);
  each of their jobs is a sample: the time until a surviving node holds its lease. The bound is
  the lease's ttl (3 heartbeats) plus one supervision period.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from bench.databases import fresh_database, recreate
from bench.measure import cpu_seconds, percentile

HEARTBEAT = 5.0  # JOBS_NODE_HEARTBEAT's default
LEASE_TTL = 30.0  # a continuous job's default lease ttl; it lasts 3 heartbeats if shorter
RENEW_EVERY = min(LEASE_TTL, 3 * HEARTBEAT) / 3  # renewed every third of its effective ttl
# A settled cluster's nodes read the whole snapshot this often with supervision on change
# (what the takeover simulation measures: its leases and nodes' deadlines 10-15 s ahead).
SETTLED_SNAPSHOT_EVERY = 10.0


@dataclass(frozen=True)
class Size:
    nodes: int
    jobs: int
    snapshot_ms: tuple[float, float]  # median, p99
    snapshot_kb: float
    heartbeat_ms: tuple[float, float]
    renew_ms: tuple[float, float]
    version_ms: tuple[float, float]

    @property
    def per_node_rates(self) -> tuple[float, float, float]:
        """Statements per second one node makes: snapshots, heartbeats, renewals (a lease
        lasts 3 heartbeats, renewed every third of that)."""
        held = self.jobs / self.nodes
        return 1.0, 1.0 / HEARTBEAT, held / (RENEW_EVERY)

    def projected(self, on_change: bool = False) -> tuple[float, float]:
        """The whole cluster's statements per second and database milliseconds per second:
        with the snapshot read every second, or (``on_change``) the version row every second
        and the snapshot every ``SETTLED_SNAPSHOT_EVERY`` seconds, as in a settled cluster."""
        snap, beat, renew = self.per_node_rates
        version = 0.0
        if on_change:
            snap, version = 1.0 / SETTLED_SNAPSHOT_EVERY, 1.0 - 1.0 / SETTLED_SNAPSHOT_EVERY
        per_second = self.nodes * (snap + version + beat + renew)
        busy = self.nodes * (
            snap * self.snapshot_ms[0]
            + version * self.version_ms[0]
            + beat * self.heartbeat_ms[0]
            + renew * self.renew_ms[0]
        )
        return per_second, busy


def _fill(url: str, nodes: int, jobs: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE jobs_lease, jobs_node, jobs_job CASCADE")
        conn.execute(
            """
            INSERT INTO jobs_node (name, host, pid, queues, concurrency, version, state,
                                   started_at, last_heartbeat, heartbeat_interval)
            SELECT 'node-' || n, 'host-' || n, n, '["default"]'::jsonb, 4, 'bench', 'alive',
                   now(), now(), %s
              FROM generate_series(1, %s) AS n
            """,
            [HEARTBEAT, nodes],
        )
        conn.execute(
            """
            INSERT INTO jobs_job (name, name_skeleton, task, kind, enabled, args, kwargs, overlap,
                                  start_deadline, catch_up, on_lost, max_retries, retry_backoff,
                                  lease_ttl, min_hold, queue, alert_channels, alert_reasons,
                                  managed_by_code, adopted, description, exchange,
                                  routing_key, created_at, updated_at, max_concurrency)
            SELECT 'poller-' || j, 'poller-' || translate(j::text, '01', 'Ol'), -- as skeleton()
                   'bench.poll', 'continuous', true, '[]', '{}', 'skip', 300,
                   'latest', 'abandon', 0, 10, %s, 0, 'default', 'default', '[]', false,
                   false, '', '', '', now(), now(), 1
              FROM generate_series(1, %s) AS j
            """,
            [int(LEASE_TTL), jobs],
        )
        conn.execute(
            """
            INSERT INTO jobs_lease (key, holder, token, acquired_at, expires_at)
            SELECT 'job:poller-' || j, 'node-' || (1 + j %% %s) || ':1:poller-' || j, 1, now(),
                   now() + interval '1 hour'
              FROM generate_series(1, %s) AS j
            """,
            [nodes, jobs],
        )
        conn.execute("ANALYZE")


def _timed(conn: psycopg.Connection, samples: int, statement: Callable[[], object]) -> list[float]:
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        statement()
        times.append((time.perf_counter() - started) * 1000)
    return times


def _measure(url: str, nodes: int, jobs: int, samples: int, snapshot_sql: str) -> Size:
    from jobs.continuous.supervisor import _VERSION

    with psycopg.connect(url, autocommit=True) as conn:
        size = [0]

        def snapshot() -> None:
            row = conn.execute(snapshot_sql, {"keys": []}).fetchone()
            assert row is not None
            size[0] = sum(len(str(part)) for part in row)

        heartbeat_sql = (
            "UPDATE jobs_node SET last_heartbeat = now(), queues = %s::jsonb "
            "WHERE name = %s AND pid = %s AND state = 'alive'"
        )
        renew_sql = (
            "UPDATE jobs_lease SET expires_at = now() + make_interval(secs => %s) "
            "WHERE key = %s AND token = %s AND expires_at > now() "
            "RETURNING expires_at, stop_requested_by"
        )
        snap = _timed(conn, samples, snapshot)
        beat = _timed(
            conn, samples, lambda: conn.execute(heartbeat_sql, ['["default"]', "node-1", 1])
        )
        renew = _timed(
            conn, samples, lambda: conn.execute(renew_sql, [LEASE_TTL, "job:poller-1", 1])
        )

    def stats(values: list[float]) -> tuple[float, float]:
        return statistics.median(values), percentile(values, 99)

    with psycopg.connect(url, autocommit=True) as conn:
        version = _timed(conn, samples, lambda: conn.execute(_VERSION).fetchone())
    return Size(nodes, jobs, stats(snap), size[0] / 1024, stats(beat), stats(renew), stats(version))


def _simulate(url: str, nodes: int, jobs: int, seconds: float, snapshot_sql: str) -> str:
    """``nodes`` threads, each one node making its statements at their rates; what it sustained."""
    statements = [0] * nodes
    lateness: list[list[float]] = [[] for _ in range(nodes)]
    stop = threading.Event()
    held_per_node = max(1, jobs // nodes)

    def node(index: int) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            name = f"node-{index + 1}"
            next_tick = time.monotonic() + (index / nodes)  # spread over the second
            next_beat = next_tick
            next_renew = next_tick
            while not stop.is_set():
                now = time.monotonic()
                if now < next_tick:
                    time.sleep(min(next_tick - now, 0.05))
                    continue
                lateness[index].append(now - next_tick)
                conn.execute(snapshot_sql, {"keys": []}).fetchone()
                statements[index] += 1
                if now >= next_beat:
                    conn.execute(
                        "UPDATE jobs_node SET last_heartbeat = now() WHERE name = %s", [name]
                    )
                    statements[index] += 1
                    next_beat += HEARTBEAT
                if now >= next_renew:
                    for held in range(held_per_node):
                        job = 1 + (index + held * nodes) % jobs
                        conn.execute(
                            "UPDATE jobs_lease SET expires_at = now() + interval '1 hour' "
                            "WHERE key = %s",
                            [f"job:poller-{job}"],
                        )
                    statements[index] += held_per_node
                    next_renew += RENEW_EVERY
                next_tick += 1.0

    threads = [threading.Thread(target=node, args=(i,), daemon=True) for i in range(nodes)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(10)
    elapsed = time.monotonic() - started
    late = [value for values in lateness for value in values[2:]]  # after warming up
    rate = sum(statements) / elapsed
    median_late = statistics.median(late) * 1000 if late else float("nan")
    p99_late = percentile(late, 99) * 1000 if late else float("nan")
    return (
        f"| {nodes} threads, {jobs} jobs | {rate:,.0f} statements/s | tick lateness median "
        f"{median_late:,.0f} ms, p99 {p99_late:,.0f} ms |"
    )


def _server_cpu(conn: psycopg.Connection) -> float:
    """CPU seconds the server processes of this database have used (from ``/proc``: the server
    runs on this machine), so the database's own work, not the clients' waiting."""
    pids = [row[0] for row in conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
    )]  # fmt: skip
    return cpu_seconds(pids)


def _takeover(url: str, nodes: int, jobs: int, gated: bool, steady: float) -> str:
    """``nodes`` simulated supervisors share ``jobs`` continuous jobs; their statements and the
    database time they take over ``steady`` settled seconds; then a tenth of them die at once:
    how long until their jobs are held by the others. ``gated``: a tick reads the whole
    snapshot only when the cluster version moved or a deadline it announced came (what
    ``jobs.continuous.supervisor`` does); otherwise every tick reads it (what it did before)."""
    from jobs.continuous.placement import plan
    from jobs.continuous.supervisor import (
        _SNAPSHOT,
        _VERSION,
        FULL_LOOK_AT_LEAST_EVERY,
        effective_ttl,
        node_of,
    )
    from jobs.guard.lease import _ACQUIRE_PG, _RENEW_PG

    ttl = effective_ttl(LEASE_TTL, HEARTBEAT)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE jobs_lease")  # every job free: the nodes spread them first
    stop = threading.Event()
    dead = threading.Event()
    counting = threading.Event()
    doomed = set(range(0, nodes, 10))  # every tenth node
    taken: dict[str, tuple[str, float]] = {}  # key -> (node, monotonic time it acquired)
    counts = {"statements": 0, "snapshots": 0}
    lock = threading.Lock()

    def node(index: int) -> None:
        name = f"node-{index + 1}"
        holder = f"{name}:1:continuous"
        held: dict[str, tuple[int, float]] = {}  # key -> (token, monotonic renewal due)
        seen_version: int | None = None
        quiet_until = 0.0
        with psycopg.connect(url, autocommit=True) as conn:

            def run(sql: str, params: Any = None, snapshot: bool = False) -> Any:
                row = conn.execute(sql, params).fetchone()
                if counting.is_set():
                    with lock:
                        counts["statements"] += 1
                        counts["snapshots"] += snapshot
                return row

            next_beat = time.monotonic()
            wake = time.monotonic() + index / nodes
            while not stop.is_set():
                if index in doomed and dead.is_set():
                    return  # stopped dead: no statement more, its leases lapse
                now = time.monotonic()
                if now < wake:
                    time.sleep(min(wake - now, 0.05))
                    continue
                if now >= next_beat:
                    run("UPDATE jobs_node SET last_heartbeat = now() WHERE name = %s RETURNING 1",
                        [name])  # fmt: skip
                    next_beat += HEARTBEAT
                for key, (token, due) in list(held.items()):
                    if now >= due:
                        renewed = run(_RENEW_PG, {"key": key, "token": token, "ttl": ttl})
                        if renewed is None:
                            del held[key]
                        else:
                            held[key] = (token, now + ttl / 3)
                if gated and now < quiet_until and run(_VERSION)[0] == seen_version:
                    wake = now + min(1.0, quiet_until - now)
                    continue
                snapshot = run(_SNAPSHOT, {"keys": []}, snapshot=True)
                seen_version = snapshot[3]
                keys = {f"job:{j[1]}": j[3] for j in snapshot[0]}
                leases = {key: (h, float(left)) for key, h, left in snapshot[1]}
                live = {n: (frozenset(q or ()), float(left)) for n, q, left in snapshot[2]}
                live[name] = (frozenset(["default"]), ttl)
                desired = plan(
                    keys,
                    {n: q for n, (q, _) in live.items()},
                    {key: node_of(h) for key, (h, _) in leases.items()},
                )
                due_in = FULL_LOOK_AT_LEAST_EVERY
                for key in keys:
                    if key in held:
                        continue
                    if key in leases:
                        due_in = min(due_in, leases[key][1] + 0.02)
                    elif desired.get(key) == name:
                        got = run(_ACQUIRE_PG, {"key": key, "holder": holder, "ttl": ttl})
                        if got is not None:
                            held[key] = (int(got[0]), time.monotonic() + ttl / 3)
                            with lock:
                                taken[key] = (name, time.monotonic())
                for other, (_, dead_in) in live.items():
                    if other != name:
                        due_in = min(due_in, dead_in + 0.02)
                quiet_until = now + due_in
                wake = now + min(1.0, due_in)

    threads = [threading.Thread(target=node, args=(i,), daemon=True) for i in range(nodes)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 120
    while len(taken) < jobs and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(ttl + 2)  # settled: renewals under way, the plan balanced
    with psycopg.connect(url, autocommit=True) as conn:
        version_before = conn.execute(_VERSION).fetchone()
        cpu_before = _server_cpu(conn)
        counting.set()
        time.sleep(steady)
        counting.clear()
        server_cpu = (_server_cpu(conn) - cpu_before) / steady
        version_after = conn.execute(_VERSION).fetchone()
    assert version_before is not None and version_after is not None
    print(f"  cluster version moved {version_after[0] - version_before[0]} time(s)", flush=True)
    with lock:
        steady_counts = dict(counts)
        held_by = {key: owner for key, (owner, _) in taken.items()}
    doomed_names = {f"node-{i + 1}" for i in doomed}
    orphans = {key for key, owner in held_by.items() if owner in doomed_names}
    killed_at = time.monotonic()
    dead.set()
    deadline = killed_at + 3 * ttl + 10
    while time.monotonic() < deadline:
        with lock:
            moved = {k for k in orphans if taken[k][0] not in doomed_names}
        if moved == orphans:
            break
        time.sleep(0.05)
    stop.set()
    for thread in threads:
        thread.join(10)
    with lock:
        times = [taken[k][1] - killed_at for k in orphans if taken[k][0] not in doomed_names]
    missing = len(orphans) - len(times)
    mode = "on change" if gated else "every second"
    per_node = steady_counts["snapshots"] / steady / nodes
    return (
        f"| {nodes} nodes, {jobs} jobs, snapshot {mode} | "
        f"{steady_counts['statements'] / steady:,.0f} | {per_node:.2f} | "
        f"{server_cpu * 1000:,.0f} | {len(doomed)} ({len(orphans)} jobs) | "
        f"{statistics.median(times):.2f} / {percentile(times, 99):.2f} / {max(times):.2f} s "
        f"| {ttl + 1:.0f} s | {missing} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.nodes_bench")
    parser.add_argument("--nodes", default="100,300,1000", help="cluster sizes to time")
    parser.add_argument("--jobs", default="1000,3000", help="continuous jobs per size")
    parser.add_argument("--samples", type=int, default=200, help="timings per statement")
    # Each simulated node holds a connection: stay under the server's max_connections (100).
    parser.add_argument("--threads", type=int, default=80, help="simulated nodes (0: none)")
    parser.add_argument("--seconds", type=float, default=20.0, help="simulation length")
    parser.add_argument(
        "--takeover-jobs", default="300,1000", help="jobs of the takeover runs (empty: none)"
    )
    parser.add_argument("--steady", type=float, default=30.0, help="seconds counted, settled")
    args = parser.parse_args(argv)

    url = os.environ.get("DATABASE_URL")
    if not url or not url.startswith("postgres"):
        print("set DATABASE_URL (PostgreSQL)", file=sys.stderr)
        return 2
    name, bench_url, admin = fresh_database(url, "_nodes_bench")
    os.environ.update(DATABASE_URL=bench_url, DJANGO_DEBUG=os.environ.get("DJANGO_DEBUG", "1"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ.setdefault("CELERY_BROKER_URL", "memory://")  # settings want one; nothing is sent
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    from jobs.continuous.supervisor import _SNAPSHOT

    sizes: list[Size] = []
    simulated: list[str] = []
    takeovers: list[str] = []
    try:
        call_command("migrate", verbosity=0)
        connections.close_all()
        for jobs in (int(j) for j in args.jobs.split(",")):
            for nodes in (int(n) for n in args.nodes.split(",")):
                _fill(bench_url, nodes, jobs)
                sizes.append(_measure(bench_url, nodes, jobs, args.samples, _SNAPSHOT))
                print(f"timed {nodes} nodes, {jobs} jobs", flush=True)
            if args.threads:
                _fill(bench_url, args.threads, jobs)
                simulated.append(_simulate(bench_url, args.threads, jobs, args.seconds, _SNAPSHOT))
        for jobs in (int(j) for j in args.takeover_jobs.split(",") if j):
            for gated in (False, True):
                _fill(bench_url, args.threads, jobs)
                takeovers.append(_takeover(bench_url, args.threads, jobs, gated, args.steady))
                print(takeovers[-1], flush=True)
    finally:
        connections.close_all()
        recreate(admin, name, create=False)
    print()
    print("| nodes | jobs | snapshot ms (median / p99) | snapshot KB | version row ms "
          "| heartbeat ms | renew ms | statements/s, snapshot every s / on change "
          "| database ms/s, every s / on change |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in sizes:
        per_second, busy = s.projected()
        gated_per_second, gated_busy = s.projected(on_change=True)
        print(
            f"| {s.nodes} | {s.jobs} | {s.snapshot_ms[0]:.2f} / {s.snapshot_ms[1]:.2f} | "
            f"{s.snapshot_kb:,.0f} | {s.version_ms[0]:.2f} | {s.heartbeat_ms[0]:.2f} | "
            f"{s.renew_ms[0]:.2f} | {per_second:,.0f} / {gated_per_second:,.0f} | "
            f"{busy:,.0f} / {gated_busy:,.0f} |"
        )
    if simulated:
        print()
        print("| simulation | sustained | supervision ticks |")
        print("| --- | --- | --- |")
        for line in simulated:
            print(line)
    if takeovers:
        print()
        print("| simulated supervisors | statements/s | snapshots per node per s "
              "| server CPU ms/s | killed | takeover median / p99 / max | bound (ttl + 1 s) "
              "| not taken |")  # fmt: skip
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for line in takeovers:
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
