"""The singleton guard's cost: lease statement latency, and guarded run throughput.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/jobs \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/4 \\
        .venv/bin/python -m bench.lease_bench [--samples 2000] [--tasks 2000] [--rounds 3]

It works in its own database, ``<name of DATABASE_URL's database>_lease_bench`` on the same
server (created afresh, dropped at the end), and on queues of its own on the broker.

- **latency**: each lease statement (acquire, renew, release; the run claim that also acquires,
  the fenced finish that also releases) against the bare round trip ``SELECT 1`` and a bare
  conditional ``UPDATE`` of one row, each ``--samples`` times on one connection: median, p99,
  and the ratios of the medians. With ``--quiet-hour-runs N``, the claim and finish again after
  N finished runs were recorded and the run table analysed (statistics that call a scheduled or
  running run rare) and a backlog of older runs has waited since: the planner trap of
  migration 0025.
- **throughput**: one ``celery worker -c 2`` drains ``--tasks`` messages published before it
  started: a plain Celery no-op task, the floor (the same task committing two bare ``UPDATE``s
  of a one-row table around its no-op), the run row (the same task moving a scheduled run's own
  row to ``running`` and then ``succeeded``, so with the run table's indexes and triggers: what
  recording a run costs whatever records it), a guarded no-op run (claim with lease, heartbeat
  thread, fenced finish with release, spread over 50 jobs so the two processes never want the
  same lease), and a celery-singleton no-op task (its Redis lock is taken when publishing and
  released by the worker) when celery-singleton is installed. Each function appends its start
  time to a file; throughput is (tasks - 1) / (last start - first start), so worker start-up is not
  counted. ``--rounds`` alternate the kinds; the median per kind is reported. Beside it, the
  CPU time (user + system) a task cost the worker's processes and the database backends serving
  them, from the first start stamp to the last: a slow or busy moment of the machine moves it
  less than tasks/s, so it shows smaller differences (a backend that closed meanwhile, as the
  heartbeat's short-lived connections do, is not counted).
  ``--without-run-triggers`` measures the same with the run table's deferred triggers (alerts,
  dependencies) disabled, to size their share (a diagnosis: the platform needs them).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from celery import shared_task

from bench.databases import fresh_database, recreate
from bench.measure import append_stamp, cpu_seconds, percentile
from jobs import job

ROOT = Path(__file__).resolve().parents[1]
GUARDED_JOBS = 50

Singleton: Any
try:  # optional: a comparison, not a dependency of the platform
    Singleton = importlib.import_module("celery_singleton").Singleton
except ImportError:
    Singleton = None


# --- the functions the bench's worker runs (it imports this module through JOBS_MODULES) -----


@job("bench.noop")
def guarded_noop(ctx: Any, log: str) -> None:
    """A guarded no-op: everything a run costs, nothing of its own."""
    append_stamp(log)


@shared_task(name="bench.plain_noop")
def plain_noop(log: str, n: int) -> None:
    append_stamp(log)


# The floor of any run that is recorded in the database: its start and its outcome are each
# durable before they count, so at least two commits; here two bare conditional UPDATEs of one
# row around the same no-op (spread over as many rows as the guarded runs use jobs).
FLOOR_UPDATE = "UPDATE bench_floor SET n = n + 1 WHERE id = %(id)s AND n >= 0"


@shared_task(name="bench.floor_noop")
def floor_noop(log: str, n: int) -> None:
    floor_run(log, n)


def floor_run(log: str, n: int) -> None:
    """The floor's work: a commit, the no-op, a commit (bench.guard_cost times it bare)."""
    from jobs.guard.lease import statement_cursor

    with statement_cursor() as cursor:
        cursor.execute(FLOOR_UPDATE, {"id": n % GUARDED_JOBS})
        append_stamp(log)
        cursor.execute(FLOOR_UPDATE, {"id": n % GUARDED_JOBS})


# The run row's two states, each written as the claim and the finish write them (by the run's
# id alone, its status tested with IS NOT DISTINCT FROM: see migration 0025).
RUN_ROW_STARTED = """
UPDATE jobs_jobrun SET status = 'running', started_at = now(), node = 'bench', pid = %(pid)s,
       task_id = %(task_id)s
 WHERE id = %(id)s AND status IS NOT DISTINCT FROM 'scheduled'
"""
RUN_ROW_FINISHED = """
UPDATE jobs_jobrun SET status = 'succeeded', finished_at = now(), result = 'null'
 WHERE id = %(id)s AND status IS NOT DISTINCT FROM 'running'
"""


def run_row_floor(log: str, run_id: int) -> None:
    """The floor's body against the run's own row: started, the no-op, succeeded."""
    from jobs.guard.lease import statement_cursor

    with statement_cursor() as cursor:
        cursor.execute(RUN_ROW_STARTED, {"id": run_id, "pid": os.getpid(), "task_id": f"t{run_id}"})
        append_stamp(log)
        cursor.execute(RUN_ROW_FINISHED, {"id": run_id})


@shared_task(name="bench.run_row_noop")
def run_row_noop(log: str, run_id: int) -> None:
    run_row_floor(log, run_id)


if Singleton is not None:

    @shared_task(base=Singleton, name="bench.singleton_noop")
    def singleton_noop(log: str, n: int) -> None:
        append_stamp(log)


# --- measuring --------------------------------------------------------------------------------


def _timed(samples: int, once: Callable[[], object]) -> list[float]:
    """Milliseconds each of ``samples`` calls of ``once`` took."""
    timings = []
    for _ in range(samples):
        started = time.perf_counter_ns()
        once()
        timings.append((time.perf_counter_ns() - started) / 1e6)
    return timings


def measure_latency(samples: int, quiet_hour_runs: int = 0) -> dict[str, list[float]]:
    from django.db import connection

    from jobs.guard import lease
    from jobs.models import Job

    results: dict[str, list[float]] = {}
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_row")
        cursor.execute("CREATE TABLE bench_row (id int PRIMARY KEY, n bigint NOT NULL)")
        cursor.execute("INSERT INTO bench_row VALUES (1, 0)")

        results["SELECT 1"] = _timed(samples, lambda: cursor.execute("SELECT 1"))
        update = "UPDATE bench_row SET n = n + 1 WHERE id = 1 AND n >= 0"
        results["bare conditional UPDATE"] = _timed(samples, lambda: cursor.execute(update))

    acquire_times, release_times = [], []
    for _ in range(samples):
        started = time.perf_counter_ns()
        held = lease.acquire("bench", "bench-holder", 30)
        acquire_times.append((time.perf_counter_ns() - started) / 1e6)
        assert held is not None
        started = time.perf_counter_ns()
        assert lease.release(held)
        release_times.append((time.perf_counter_ns() - started) / 1e6)
    results["lease acquire"] = acquire_times
    held = lease.acquire("bench", "bench-holder", 30)
    assert held is not None
    results["lease renew"] = _timed(samples, lambda: lease.renew(held))
    results["lease release"] = release_times
    lease.release(held)

    job_row = Job.objects.create(name=f"bench-latency-{uuid.uuid4().hex[:8]}", task="bench.noop")
    claim_times, finish_times = _claim_and_finish(job_row, samples)
    results["run claim + lease acquire (1 statement)"] = claim_times
    results["run finish + lease release (1 statement)"] = finish_times
    if quiet_hour_runs:
        results.update(_after_a_quiet_hour(job_row, samples, quiet_hour_runs))
    return results


# Under a tenth of the finished runs, so autovacuum's analyse would not have run since.
QUIET_HOUR_BACKLOG = 5000


def _claim_and_finish(job_row: Any, samples: int) -> tuple[list[float], list[float]]:
    """A run's two statements, timed over ``samples`` fresh runs of ``job_row``: the claim that
    also takes the lease, the finish that gives it back."""
    from django.utils import timezone

    from jobs.guard import run_records
    from jobs.models import JobRun, RunStatus, Trigger

    now = timezone.now()
    runs = JobRun.objects.bulk_create(
        JobRun(job=job_row, scheduled_for=now, trigger=Trigger.MANUAL) for _ in range(samples)
    )
    claim_times, finish_times = [], []
    for run in runs:
        started = time.perf_counter_ns()
        claim = run_records.claim(run.pk, node="bench", pid=1, task_id="t", holder="bench:1")
        claim_times.append((time.perf_counter_ns() - started) / 1e6)
        assert claim is not None and claim.lease is not None
        started = time.perf_counter_ns()
        finished = run_records.finish_fenced(
            run.pk, key=claim.lease.key, token=claim.lease.token, status=RunStatus.SUCCEEDED
        )
        finish_times.append((time.perf_counter_ns() - started) / 1e6)
        assert finished.status == RunStatus.SUCCEEDED
    return claim_times, finish_times


def _after_a_quiet_hour(job_row: Any, samples: int, finished: int) -> dict[str, list[float]]:
    """The claim and finish again, with ``finished`` runs of the job recorded succeeded and the
    run table analysed then (a quiet hour: to the planner, no run is scheduled or running), and
    since then a backlog of ``QUIET_HOUR_BACKLOG`` runs of another job waiting, slots older
    than the runs timed (a queue no worker drains): the planner trap of migration 0025, where
    a statement that also tests the status walks the status index from the oldest slot and
    reads the whole backlog before it finds its run."""
    from django.db import connection

    from jobs.models import Job

    waiting = Job.objects.create(name=f"bench-backlog-{uuid.uuid4().hex[:8]}", task="bench.noop")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO jobs_jobrun (job_id, scheduled_for, trigger, status, finished_at) "
            "SELECT %s, now() - make_interval(secs => g), 'manual', 'succeeded', now() "
            "FROM generate_series(1, %s) AS g",
            [job_row.pk, finished],
        )
        cursor.execute("ANALYZE jobs_jobrun")
        cursor.execute(
            "INSERT INTO jobs_jobrun (job_id, scheduled_for, trigger, status) "
            "SELECT %s, now() - interval '1 hour' + make_interval(secs => g), 'manual', "
            "'scheduled' FROM generate_series(1, %s) AS g",
            [waiting.pk, QUIET_HOUR_BACKLOG],
        )
    claim_times, finish_times = _claim_and_finish(job_row, samples)
    label = f"{finished} finished runs analysed, {QUIET_HOUR_BACKLOG} waiting"
    return {f"run claim, {label}": claim_times, f"run finish, {label}": finish_times}


class Throughput:
    """Drains pre-published messages with a fresh ``celery worker -c 2`` per measurement."""

    def __init__(self, tasks: int, database_url: str) -> None:
        from tests.acceptance.conftest import Cluster

        self.tasks = tasks
        self.tmp = Path(tempfile.mkdtemp(prefix="lease-bench-"))
        (self.tmp / "logs").mkdir()
        env = dict(os.environ)
        env.update(
            DATABASE_URL=database_url,
            JOBS_MODULES="bench.lease_bench",
            # Production settings for the worker: debug mode records every query it makes.
            DJANGO_DEBUG="0",
            DJANGO_SECRET_KEY="lease-bench-only-" + uuid.uuid4().hex + uuid.uuid4().hex,
            DJANGO_ALLOWED_HOSTS="localhost",
            DJANGO_SETTINGS_MODULE=os.environ.get("DJANGO_SETTINGS_MODULE", "project.settings"),
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        )
        self.env = env
        self.Cluster = Cluster
        self.serial = 0
        self.jobs: list[Any] = []
        # Per kind, each round's CPU milliseconds per task: (worker, database).
        self.cpu_ms: dict[str, list[tuple[float, float]]] = {}

    def measure(self, kind: str) -> float:
        from celery import current_app

        self.serial += 1
        queue = f"lease-bench-{uuid.uuid4().hex[:8]}"
        log = self.tmp / f"{kind}-{self.serial}.log"
        cluster = self.Cluster(env=self.env, queue=queue, logs=self.tmp / "logs")
        with current_app.producer_or_acquire() as producer:
            if kind == "guarded":
                self._publish_runs(queue, str(log), producer)
            elif kind == "runrow":
                for run in self._scheduled_runs(queue, str(log)):
                    run_row_noop.apply_async(
                        args=(str(log), run.pk), queue=queue, producer=producer
                    )
            else:
                # Through the task object: celery-singleton takes its lock in apply_async.
                task: Any = {"plain": plain_noop, "floor": floor_noop}.get(kind, singleton_noop)
                for n in range(self.tasks):
                    task.apply_async(args=(str(log), n), queue=queue, producer=producer)
        try:
            cluster.start_worker(f"bench{self.serial}", concurrency=2)
            deadline = time.monotonic() + 60 + self.tasks / 20
            first: tuple[int, CpuSeconds] | None = None
            while (done := _lines(log)) < self.tasks:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{kind}: {done} of {self.tasks} done")
                if first is None and done:
                    first = (done, self._cpu_seconds(cluster))
                time.sleep(0.01 if first is None else 0.2)
            if first is not None and self.tasks > first[0]:
                spent = self._cpu_seconds(cluster) - first[1]
                self.cpu_ms.setdefault(kind, []).append(spent.per_task(self.tasks - first[0]))
            if kind in ("guarded", "runrow"):
                self._wait_recorded()
        finally:
            cluster.stop_all()
        stamps = sorted(float(line) for line in log.read_text().split())
        return (len(stamps) - 1) / (stamps[-1] - stamps[0])

    def _cpu_seconds(self, cluster: Any) -> CpuSeconds:
        """CPU time so far of the worker (its main process and pool) and of the database's
        backends serving this database's other clients (the worker's connections)."""
        from django.db import connection

        worker = [pid for process in cluster.processes.values() for pid in _tree(process.pid)]
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            )
            backends = [row[0] for row in cursor.fetchall()]
        # A backend that closed meanwhile (the heartbeat's connections) is not counted.
        return CpuSeconds(cpu_seconds(worker), cpu_seconds(backends))

    def _publish_runs(self, queue: str, log: str, producer: Any) -> None:
        from jobs.broker.messages import publish

        for run in self._scheduled_runs(queue, log):
            publish(run.job, run.pk, run.scheduled_for, producer=producer)

    def _scheduled_runs(self, queue: str, log: str) -> list[Any]:
        """``self.tasks`` scheduled runs of the bench's jobs (on ``queue``, logging to ``log``)."""
        from django.utils import timezone

        from jobs.models import Job, JobRun, Trigger
        from jobs.values.names import stored_skeleton

        if not self.jobs:
            self.jobs = Job.objects.bulk_create(
                Job(
                    name=f"bench-{i}",
                    name_skeleton=stored_skeleton(f"bench-{i}"),
                    task="bench.noop",
                    kwargs={"log": log},
                )
                for i in range(GUARDED_JOBS)
            )
        Job.objects.filter(name__startswith="bench-").update(kwargs={"log": log}, queue=queue)
        for job_row in self.jobs:
            job_row.queue = queue
        now = timezone.now()
        return JobRun.objects.bulk_create(
            JobRun(job=self.jobs[i % GUARDED_JOBS], scheduled_for=now, trigger=Trigger.MANUAL)
            for i in range(self.tasks)
        )

    def _wait_recorded(self) -> None:
        from jobs.models import JobRun, RunStatus

        deadline = time.monotonic() + 60
        while JobRun.objects.filter(status__in=[RunStatus.SCHEDULED, RunStatus.RUNNING]).exists():
            if time.monotonic() > deadline:
                raise TimeoutError("guarded runs still unfinished")
            time.sleep(0.2)
        statuses = set(JobRun.objects.values_list("status", flat=True).distinct())
        if statuses != {RunStatus.SUCCEEDED}:
            raise AssertionError(f"guarded runs ended {statuses}, not all succeeded")
        JobRun.objects.all().delete()


def disable_run_triggers() -> None:
    """The run table's deferred triggers off, in the bench's own database only."""
    from django.db import connection

    with connection.cursor() as cursor:
        for trigger in (
            "jobs_run_outcome_alerts",
            "jobs_run_recorded_alerts",
            "jobs_follow_upstreams",
        ):
            cursor.execute(f"ALTER TABLE jobs_jobrun DISABLE TRIGGER {trigger}")


def create_floor_rows() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE bench_floor (id int PRIMARY KEY, n bigint NOT NULL)")
        cursor.execute(
            "INSERT INTO bench_floor SELECT g, 0 FROM generate_series(0, %s) AS g",
            [GUARDED_JOBS - 1],
        )


@dataclass(frozen=True)
class CpuSeconds:
    worker: float
    database: float

    def __sub__(self, other: CpuSeconds) -> CpuSeconds:
        return CpuSeconds(self.worker - other.worker, self.database - other.database)

    def per_task(self, tasks: int) -> tuple[float, float]:
        """Milliseconds per task: (worker, database)."""
        return (1000 * self.worker / tasks, 1000 * self.database / tasks)


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a worker's main process and its pool)."""
    try:
        return [pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:
        return [pid]


def _lines(log: Path) -> int:
    return log.read_bytes().count(b"\n") if log.exists() else 0


# --- reporting --------------------------------------------------------------------------------


def _latency_through_pgbouncer(url: str, samples: int) -> dict[str, list[float]]:
    """The same statements on a connection through PgBouncer in transaction pooling, set up as
    ``DATABASE_POOLER=transaction`` sets it (no server-side prepared statements)."""
    from django.db import connections

    from devtools.pgbouncer import transaction_pooler

    print(f"latency through PgBouncer: {samples} samples per statement...", flush=True)
    with transaction_pooler(url) as pooler:
        connections.close_all()
        direct = dict(connections["default"].settings_dict)
        target = connections["default"].settings_dict
        target.update(HOST="127.0.0.1", PORT=str(pooler.port), DISABLE_SERVER_SIDE_CURSORS=True)
        target["OPTIONS"] = {**target.get("OPTIONS", {}), "prepare_threshold": None}
        try:
            return measure_latency(samples)
        finally:
            connections.close_all()
            target.clear()
            target.update(direct)


def latency_table(results: dict[str, list[float]]) -> str:
    base = statistics.median(results["SELECT 1"])
    update = statistics.median(results["bare conditional UPDATE"])
    lines = [
        "| statement | median ms | p99 ms | vs SELECT 1 | vs bare UPDATE |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, values in results.items():
        median = statistics.median(values)
        lines.append(
            f"| {name} | {median:.3f} | {percentile(values, 99):.3f} | {median / base:.1f} "
            f"| {median / update:.2f} |"
        )
    return "\n".join(lines)


def throughput_table(
    results: dict[str, list[float]],
    tasks: int,
    cpu_ms: dict[str, list[tuple[float, float]]] | None = None,
) -> str:
    """Medians per kind, and the medians of the per-round ratios to plain Celery and to the
    floor (the rounds alternate the kinds, so a ratio compares measurements moments apart);
    and the median CPU time a task cost the worker and the database, which a busy or slow
    moment of the machine moves less than it moves tasks/s."""

    def ratio(values: list[float], base: str) -> str:
        if base not in results:
            return "-"
        pairs = zip(values, results[base], strict=True)
        return f"{statistics.median(v / b for v, b in pairs):.2f}"

    lines = [
        f"| no-op, one worker -c 2, {tasks} tasks | tasks/s (median) | each round "
        "| vs plain Celery | vs the floor | CPU ms per task: worker / database |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    labels = {
        "plain": "plain Celery task",
        "floor": "plain task + two bare UPDATE commits (the floor of a recorded run)",
        "runrow": "plain task + the same two commits moving its run's row",
        "guarded": "guarded run (claim + lease, heartbeat, fenced finish + release)",
        "singleton": "celery-singleton task (Redis lock)",
    }
    for kind, values in results.items():
        rounds = ", ".join(f"{v:.0f}" for v in values)
        spent = (cpu_ms or {}).get(kind)
        cpu = "-"
        if spent:
            worker = statistics.median(w for w, _ in spent)
            database = statistics.median(d for _, d in spent)
            cpu = f"{worker:.2f} / {database:.2f}"
        lines.append(
            f"| {labels[kind]} | {statistics.median(values):.0f} | {rounds} "
            f"| {ratio(values, 'plain')} | {ratio(values, 'floor')} | {cpu} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lease_bench")
    parser.add_argument("--samples", type=int, default=2000, help="per latency measurement")
    parser.add_argument("--tasks", type=int, default=2000, help="per throughput measurement")
    parser.add_argument("--rounds", type=int, default=3, help="throughput rounds per kind")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument(
        "--kinds",
        default="plain,floor,runrow,guarded,singleton",
        help="throughput kinds, comma-separated",
    )
    parser.add_argument(
        "--through-pgbouncer",
        action="store_true",
        help="measure the latency again through a private PgBouncer in transaction pooling",
    )
    parser.add_argument(
        "--quiet-hour-runs",
        type=int,
        default=0,
        help="also time the claim and finish with this many finished runs analysed beforehand",
    )
    parser.add_argument(
        "--without-run-triggers",
        action="store_true",
        help="diagnosis: disable the run table's deferred triggers (alerts, dependencies) to "
        "size their share of a guarded run; the platform never runs without them",
    )
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    args = parser.parse_args(argv)

    url = os.environ.get("DATABASE_URL")
    if not url or not url.startswith("postgres") or not os.environ.get("CELERY_BROKER_URL"):
        print("set DATABASE_URL (PostgreSQL) and CELERY_BROKER_URL", file=sys.stderr)
        return 2
    name, bench_url, admin = fresh_database(url, "_lease_bench")
    os.environ.update(DATABASE_URL=bench_url, DJANGO_DEBUG=os.environ.get("DJANGO_DEBUG", "1"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    try:
        call_command("migrate", verbosity=0)
        if args.without_run_triggers:
            disable_run_triggers()
        print(f"latency: {args.samples} samples per statement...", flush=True)
        latency = measure_latency(args.samples, args.quiet_hour_runs)
        if args.through_pgbouncer:
            pooled = _latency_through_pgbouncer(bench_url, args.samples)
            latency.update({f"{name}, through PgBouncer": v for name, v in pooled.items()})
        throughput: dict[str, list[float]] = {}
        cpu_ms: dict[str, list[tuple[float, float]]] = {}
        kinds = [
            kind
            for kind in args.kinds.split(",")
            if kind in ("plain", "floor", "runrow", "guarded")
            or (kind == "singleton" and Singleton is not None)
        ]
        if not args.skip_throughput:
            create_floor_rows()
            bench = Throughput(args.tasks, bench_url)
            cpu_ms = bench.cpu_ms
            try:
                for round_ in range(args.rounds):
                    for kind in kinds:
                        rate = bench.measure(kind)
                        throughput.setdefault(kind, []).append(rate)
                        print(f"  round {round_ + 1}: {kind} {rate:.0f} tasks/s", flush=True)
            finally:
                shutil.rmtree(bench.tmp, ignore_errors=True)  # logs and start stamps
    finally:
        connections.close_all()
        recreate(admin, name, create=False)

    print()
    print(latency_table(latency))
    if throughput:
        print()
        print(throughput_table(throughput, args.tasks, cpu_ms))
    if Singleton is None:
        print("\ncelery-singleton is not installed: its row is missing "
              "(pip install celery-singleton to compare).")  # fmt: skip
    if args.json:
        args.json.write_text(
            json.dumps({"latency_ms": latency, "throughput": throughput, "cpu_ms": cpu_ms})
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
