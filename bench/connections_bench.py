"""The web beside the guard (issue 29): web processes hammered by concurrent API clients while
two beats and two workers run 1 s jobs, in a database of its own.

The web is gunicorn (``--web-processes`` x ``--web-threads``, gthread) with the web's pool
(``DATABASE_POOL_MAX_SIZE`` = ``--pool``, ``DATABASE_POOL_TIMEOUT`` = ``--pool-timeout``), or
``--server runserver`` (``make run``'s: a thread per request) in one process. The beats and
workers run as compose and ``make run`` start them (no pool). Jobs: ``--jobs`` jobs of 1 s due
every 2 s and one of 20 s due every 25 s, all with a 3 s lease (a renewal every second), on a
queue of the bench's own.

Phases, each ``--seconds`` long: ``--clients`` API clients (threads of this process, each
looping ``GET /api/runs?limit=1`` with a token on a kept HTTP connection); then, unless
``--overload-seconds 0``, the past-the-budget phase: as many clients as the last phase while the
API token table is locked for ``--overload-seconds`` (every request holds its pooled connection
waiting on the lock, as slow queries would; beats and workers never read that table), so the
web's connections are all busy and the requests beyond them wait ``--pool-timeout`` for one.

Reported: API answers by status, p50/p99 latency, peak connections by process kind
(``pg_stat_activity``, by ``application_name``, sampled every 50 ms), renewal failures and
lost leases in the workers' logs, and the runs by status (lost must be 0, every slot once).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import http.client
import os
import re
import secrets
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.processes import CELERY, Processes, wait_until

ROOT = Path(__file__).resolve().parent.parent
JOBS_MODULE = "bench.connections_jobs"
LEASE_TTL = 3


def _free_port() -> int:
    from devtools.services import free_port

    return free_port()


# --- connections by process kind ---------------------------------------------------------------

KINDS = ("web", "beat", "worker main", "worker pool process")


def kind_of(application_name: str) -> str:
    """``clusterjobs worker NODE pool`` -> ``worker pool process``, and so on."""
    if application_name == "clusterjobs web":
        return "web"
    if application_name == "clusterjobs beat":
        return "beat"
    if application_name.startswith("clusterjobs worker "):
        return "worker pool process" if application_name.endswith(" pool") else "worker main"
    return application_name or "(unnamed)"


class Sampler:
    """Connections to the bench's database by process kind, every 50 ms, on a thread: the
    peak of each kind and of the total, overall and since the last ``mark()``."""

    def __init__(self, url: str) -> None:
        self._conn = psycopg.connect(url, autocommit=True)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.peaks: collections.Counter[str] = collections.Counter()
        self.phase_peaks: collections.Counter[str] = collections.Counter()
        self.by_name: collections.Counter[str] = collections.Counter()  # peak per process name
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._conn.close()

    def mark(self) -> collections.Counter[str]:
        with self._lock:
            peaks, self.phase_peaks = self.phase_peaks, collections.Counter()
        return peaks

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            rows = self._conn.execute(
                "SELECT coalesce(application_name, '') FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchall()
            names = collections.Counter(name for (name,) in rows)
            kinds: collections.Counter[str] = collections.Counter()
            for name, count in names.items():
                kinds[kind_of(name)] += count
            kinds["total"] = len(rows)
            kinds["platform"] = sum(kinds[kind] for kind in KINDS)
            with self._lock:
                for kind, count in kinds.items():
                    self.peaks[kind] = max(self.peaks[kind], count)
                    self.phase_peaks[kind] = max(self.phase_peaks[kind], count)
                for name, count in names.items():
                    self.by_name[name] = max(self.by_name[name], count)


# --- API clients -----------------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    clients: int
    statuses: collections.Counter[str] = field(default_factory=collections.Counter)
    latencies: list[float] = field(default_factory=list)
    latencies_503: list[float] = field(default_factory=list)
    peaks: collections.Counter[str] = field(default_factory=collections.Counter)
    seconds: float = 0.0


def hammer(port: int, token: str, phase: Phase, seconds: float) -> None:
    """``phase.clients`` threads, each looping ``GET /api/runs?limit=1`` for ``seconds``."""
    lock = threading.Lock()
    until = time.monotonic() + seconds
    headers = {"Authorization": f"Bearer {token}"}

    def client() -> None:
        conn: http.client.HTTPConnection | None = None
        while time.monotonic() < until:
            started = time.monotonic()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn.request("GET", "/api/runs?limit=1", headers=headers)
                response = conn.getresponse()
                response.read()
                status = str(response.status)
                if response.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as exc:
                status = type(exc).__name__
                if conn is not None:
                    conn.close()
                conn = None
            elapsed = time.monotonic() - started
            with lock:
                phase.statuses[status] += 1
                phase.latencies.append(elapsed)
                if status == "503":
                    phase.latencies_503.append(elapsed)
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=client) for _ in range(phase.clients)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    phase.seconds = time.monotonic() - started


@contextlib.contextmanager
def token_table_locked(url: str, after: float, hold: float) -> Iterator[None]:
    """From ``after`` seconds on, for ``hold`` seconds, the API token table is locked: every API
    request waits at authentication, holding its pooled connection."""

    def lock() -> None:
        time.sleep(after)
        with psycopg.connect(url) as conn:
            conn.execute("LOCK TABLE jobs_apitoken IN ACCESS EXCLUSIVE MODE")
            time.sleep(hold)
            conn.rollback()

    thread = threading.Thread(target=lock)
    thread.start()
    try:
        yield
    finally:
        thread.join()


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


# --- the bench -------------------------------------------------------------------------------


def _create_jobs(queue: str, count: int) -> None:
    from jobs.audit import Actor
    from jobs.schedule.kinds import Every
    from jobs.services import JobDefinition, create_job

    policies = {"queue": queue, "lease_ttl": LEASE_TTL}
    for n in range(count):
        create_job(
            JobDefinition(
                name=f"second-{n}",
                task="bench.second",
                schedule=Every(2),
                kwargs={},
                policies=policies,
            ),
            actor=Actor.code("bench"),
        )
    create_job(
        JobDefinition(
            name="twenty",
            task="bench.twenty_seconds",
            schedule=Every(25),
            kwargs={},
            policies=policies,
        ),
        actor=Actor.code("bench"),
    )


def _runs_by_status() -> dict[str, int]:
    from django.db.models import Count

    from jobs.models import JobRun

    rows = JobRun.objects.values("status").annotate(n=Count("id"))
    return {row["status"]: row["n"] for row in rows}


def _slots_run_twice() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM (SELECT job_id, scheduled_for FROM jobs_jobrun "
            "WHERE trigger = 'schedule' GROUP BY 1, 2 HAVING count(*) > 1) AS twice"
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def run(args: argparse.Namespace, url: str, logs: Path) -> dict[str, Any]:
    from jobs.audit import Actor
    from jobs.web import tokens

    queue = f"bench-connections-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ)
    env.update(
        DATABASE_URL=url,
        JOBS_MODULES=JOBS_MODULE,
        DJANGO_DEBUG="1",
        DJANGO_SETTINGS_MODULE="project.settings",
        PYTHONPATH=str(ROOT),
        JOBS_BEAT_MAX_INTERVAL="0.2",
    )
    env.pop("DATABASE_POOL_MAX_SIZE", None)
    web_port = _free_port()
    processes = Processes(env, logs)
    result: dict[str, Any] = {"phases": []}
    with Sampler(url) as sampler:
        try:
            for n in (1, 2):
                processes.start(f"beat-{n}", [*CELERY, "beat", "-l", "info"])
            for n in (1, 2):
                processes.start(
                    f"worker-{n}",
                    [*CELERY, "worker", "-n", f"bench{n}@%h", "-Q", queue, "-c", "2", "-l",
                     "info", "--without-gossip", "--without-mingle"],
                )  # fmt: skip
            web_env = {
                "DATABASE_POOL_MAX_SIZE": str(args.pool),
                "DATABASE_POOL_TIMEOUT": str(args.pool_timeout),
                # Without the pool (--pool 0: the web as it was) its connections keep the name.
                "DATABASE_URL": f"{url}?application_name=clusterjobs%20web",
                # Production settings, as compose runs the web (plain HTTP on loopback).
                "DJANGO_DEBUG": "0",
                "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
                "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
                "DJANGO_SECURE_SSL_REDIRECT": "0",
            }
            if args.server == "gunicorn":
                web = [
                    sys.executable, "-m", "gunicorn", "project.wsgi:application",
                    f"--bind=127.0.0.1:{web_port}", f"--workers={args.web_processes}",
                    f"--threads={args.web_threads}", "--worker-class=gthread",
                    "--graceful-timeout=10", "--log-level=warning",
                ]  # fmt: skip
            else:
                web = [sys.executable, str(ROOT / "manage.py"), "runserver",
                       f"127.0.0.1:{web_port}", "--noreload"]  # fmt: skip
                web_env["DJANGO_DEBUG"] = "1"  # runserver serves nothing without it
            processes.start("web", web, web_env)
            wait_until(
                lambda: all(
                    "beat loaded" in processes.log(f"beat-{n}")
                    and "ready." in processes.log(f"worker-{n}")
                    for n in (1, 2)
                ),
                120,
                "beats and workers to start",
            )
            wait_until(lambda: _answers(web_port), 60, "the web to answer")
            _create_jobs(queue, args.jobs)
            wait_until(lambda: _runs_by_status().get("succeeded", 0) >= args.jobs, 60, "first runs")
            token = tokens.create(f"bench-{uuid.uuid4().hex[:6]}", actor=Actor.code("bench"))[1]
            sampler.mark()

            for clients in args.clients:
                phase = Phase(f"{clients} clients", clients)
                print(f"phase: {phase.name}, {args.seconds:g} s", flush=True)
                hammer(web_port, token, phase, args.seconds)
                phase.peaks = sampler.mark()
                result["phases"].append(phase)
            if args.overload_seconds > 0:
                clients = args.clients[-1]
                phase = Phase(
                    f"{clients} clients, token table locked {args.overload_seconds:g} s", clients
                )
                print(f"phase: {phase.name}", flush=True)
                with token_table_locked(url, 2.0, args.overload_seconds):
                    hammer(web_port, token, phase, args.overload_seconds + 5.0)
                phase.peaks = sampler.mark()
                result["phases"].append(phase)
            # The jobs go on a little without clients; the long job's lease meanwhile too.
            time.sleep(3.0)
        finally:
            processes.stop("web")
            processes.stop_all()
        result["peaks"] = dict(sampler.peaks)
        result["by_name"] = dict(sampler.by_name)
    worker_logs = processes.log("worker-1") + processes.log("worker-2")
    result["renewal_failures"] = worker_logs.count("lease renewal failed")
    result["leases_lost"] = worker_logs.count("lease lost")
    result["heartbeat_reconnects"] = worker_logs.count("lease heartbeat's connection broke")
    web_log = processes.log("web")
    result["web_tracebacks"] = web_log.count("Traceback")
    result["pool_timeouts_logged"] = len(re.findall(r"couldn't get a connection", web_log))
    result["runs"] = _runs_by_status()
    result["slots_twice"] = _slots_run_twice()
    result["max_connections"] = int(_show(url, "max_connections"))
    result["server"] = args.server
    result["budget"] = {
        "web": args.pool * (args.web_processes if args.server == "gunicorn" else 1) or "none",
        "beat": 2 * 3,
        "worker main": 2 * 3,
        "worker pool process": 2 * 2 * 2,
    }
    return result


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError, http.client.HTTPException):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/livez")
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    return False


def _show(url: str, setting: str) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(f"SHOW {setting}").fetchone()
    return str(row[0]) if row else ""


def report(args: argparse.Namespace, result: dict[str, Any]) -> str:
    web = (
        f"gunicorn {args.web_processes} processes x {args.web_threads} threads"
        if args.server == "gunicorn"
        else "runserver (a thread per request)"
    )
    pool = (
        f"pool {args.pool} per process, timeout {args.pool_timeout:g} s" if args.pool else "no pool"
    )
    lines = [
        f"connections benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPU(s); "
        f"web: {web}, {pool}; "
        f"2 beats, 2 workers -c 2; {args.jobs} jobs of 1 s every 2 s + one of 20 s, lease 3 s; "
        f"server max_connections {result['max_connections']}",
        "",
        "| phase | answers by status | p50 ms | p99 ms | 503 waited (median s) "
        "| peak web conns | peak total conns (the bench's own included) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for phase in result["phases"]:
        statuses = ", ".join(f"{s}: {n:,}" for s, n in sorted(phase.statuses.items()))
        rate = sum(phase.statuses.values()) / phase.seconds if phase.seconds else 0
        waited = f"{percentile(phase.latencies_503, 50):.2f}" if phase.latencies_503 else "-"
        lines.append(
            f"| {phase.name} ({rate:.0f}/s) | {statuses} | "
            f"{percentile(phase.latencies, 50) * 1000:.0f} | "
            f"{percentile(phase.latencies, 99) * 1000:.0f} | {waited} | "
            f"{phase.peaks.get('web', 0)} | {phase.peaks.get('total', 0)} |"
        )
    lines += ["", "| process kind | peak connections | budget (docs/connections.md) |",
              "| --- | --- | --- |"]  # fmt: skip
    budget = result["budget"]
    for kind in KINDS:
        lines.append(f"| {kind} | {result['peaks'].get(kind, 0)} | {budget[kind]} |")
    bounded = all(isinstance(n, int) for n in budget.values())
    lines.append(
        f"| all four at once | {result['peaks'].get('platform', 0)} | "
        f"{sum(budget.values()) if bounded else 'none'} |"
    )
    others = {k: v for k, v in result["peaks"].items() if k not in (*KINDS, "platform", "total")}
    if others:
        lines.append(f"\nthe bench's own connections (peak): {others}")
    lines += [
        "",
        "peak per process name: "
        + ", ".join(f"{name or '(unnamed)'}: {n}" for name, n in sorted(result["by_name"].items())),
        f"runs by status: {result['runs']}; slots run twice: {result['slots_twice']}",
        f"worker logs: {result['renewal_failures']} renewal failures, {result['leases_lost']} "
        f"leases lost, {result['heartbeat_reconnects']} heartbeat reconnects; web log: "
        f"{result['pool_timeouts_logged']} pool timeouts, {result['web_tracebacks']} tracebacks",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.connections_bench")
    parser.add_argument("--clients", default="8,32", help="API clients per phase, comma-separated")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    parser.add_argument(
        "--overload-seconds", type=float, default=12.0, help="token table locked (0: no phase)"
    )
    parser.add_argument("--server", choices=("gunicorn", "runserver"), default="gunicorn")
    parser.add_argument("--web-processes", type=int, default=2)
    parser.add_argument("--web-threads", type=int, default=8)
    parser.add_argument("--pool", type=int, default=4, help="DATABASE_POOL_MAX_SIZE of the web")
    parser.add_argument("--pool-timeout", type=float, default=5.0, help="DATABASE_POOL_TIMEOUT")
    parser.add_argument("--jobs", type=int, default=6, help="1 s jobs, each due every 2 s")
    parser.add_argument("--keep", action="store_true", help="keep the database and the logs")
    args = parser.parse_args(argv)
    args.clients = [int(n) for n in args.clients.split(",") if n]

    from bench.databases import django_on_fresh_database

    logs = Path(tempfile.mkdtemp(prefix="connections-bench-"))
    with django_on_fresh_database("_connections_bench", JOBS_MODULE, keep=args.keep) as url:
        result = run(args, url, logs)
    print()
    print(report(args, result))
    if args.keep:
        print(f"\nlogs: {logs}")
    else:
        shutil.rmtree(logs, ignore_errors=True)
    ok = (
        result["renewal_failures"] == 0
        and result["leases_lost"] == 0
        and result["runs"].get("lost", 0) == 0
        and result["slots_twice"] == 0
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
