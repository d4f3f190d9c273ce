"""What a Django task costs on the cluster (``jobs.django_tasks``), against Django's own
database backend (django-tasks-db), a guarded Celery task's call and a plain Celery task's
(Django 6: run it with ``.venv-django6``, whose pins include django-tasks-db):

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/jobs \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/4 \\
        .venv-django6/bin/python -m bench.django_tasks_bench \\
        [--calls 1000] [--rounds 5] [--tasks 500]

It runs under ``bench.django_tasks_settings`` (the platform's settings plus django-tasks-db's
app and its backend as the ``TASKS`` alias ``db``). First, per call, in one process with no
worker, alternating by round, ``--calls`` times each:

- **enqueue**: ``noop.enqueue(i)`` of a Django ``@task`` (``bench.django_tasks_jobs``): the run
  recorded, published to Redis after commit, its ``TaskResult`` made;
- **db enqueue**: ``db_noop.enqueue(i)`` of a ``@task(backend="db")``: django-tasks-db's one
  ``INSERT`` of its result row (its worker polls the table: there is nothing to publish);
- **delay**: ``guarded_noop.delay(i)`` of a ``GuardedTask``, the same recording and publishing;
- **floor**: what any durable enqueue must do, and nothing else: one ``INSERT`` of a run through
  Django's ORM (autocommit) plus one Celery publish of its message (``send_task``);
- **celery delay**: ``plain_noop.delay(i)`` of a plain Celery task (a publish, nothing
  recorded): a peer with no durable record;
- **run enqueued**: ``execute_run`` of an enqueued run, as a worker would: the claim, a lease of
  the run's own (taken in a second statement, since no two runs share it), the call, the fenced
  finish;
- **run delayed**: ``execute_run`` of a delayed call's run, whose job's lease the claim takes in
  the same statement (the job is ``overlap=wait`` so each run takes it in turn).

Per call, the median and p99 wall time of the rounds' medians and p99s, and each enqueue's
median against the floor's.

Then, unless ``--tasks 0``, **throughput with the workers running**: one
``celery -A project worker -c 2`` on the bench's queue and two django-tasks-db ``db_worker``
processes (``--interval 0.1``: two of each, to match the worker's two children), all started
once and kept running. Alternating by round (``--rounds``, after a warm-up round), each of
``noop.enqueue`` (ours), ``db_noop.enqueue`` (django-tasks-db) and ``counted_noop.delay`` (plain
Celery, which bumps a Redis counter, since a plain task records nothing) is called ``--tasks``
times as fast as the bench process can; then it polls (every 20 ms) each backend's own record
until all are done: our runs ``succeeded``, django-tasks-db's result rows ``SUCCESSFUL``, the
counter at ``--tasks``. Enqueued per second is tasks / the enqueue loop's time; completed per
second, tasks / the time from the first enqueue until all were seen done. The workers run with
``DJANGO_DEBUG=0``, their logs in a temporary directory (printed).

The messages go to a queue of the benchmark's own, purged at the end; it works in its own
database (``<DATABASE_URL's name>_django_tasks``). The machine's load average is printed at the
start and the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.databases import django_on_fresh_database
from bench.guard_cost import _log_to_nowhere
from bench.measure import percentile
from bench.processes import CELERY, ROOT, Processes

QUEUE = "bench-django-tasks"
SETTINGS = "bench.django_tasks_settings"
KINDS = ("enqueue", "db enqueue", "delay", "floor", "celery delay", "run enqueued", "run delayed")
# Throughput with the workers running: ours, django-tasks-db's, plain Celery's.
FLOWS = ("enqueue", "db enqueue", "celery delay")
LABELS = {
    "enqueue": "`enqueue()`, ours",
    "db enqueue": "`enqueue()`, django-tasks-db",
    "delay": "`GuardedTask.delay()`",
    "floor": "floor: `INSERT` + publish",
    "celery delay": "plain Celery `.delay()` (nothing recorded)",
    "run enqueued": "run an enqueued run (`execute_run`)",
    "run delayed": "run a delayed call's run (`execute_run`)",
}
FLOW_LABELS = {
    "enqueue": "`enqueue()`, ours (Celery worker `-c 2`)",
    "db enqueue": "`enqueue()`, django-tasks-db (two `db_worker`s)",
    "celery delay": "plain Celery `.delay()` (Celery worker `-c 2`)",
}


def _run_id(result: object) -> int:
    return int(str(getattr(result, "id", "")).removeprefix("jobrun-"))


def _timed(count: int, once: Callable[[int], object]) -> list[float]:
    walls = []
    for i in range(count):
        started = time.perf_counter()
        once(i)
        walls.append((time.perf_counter() - started) * 1000)
    return walls


def measure(calls: int, rounds: int) -> dict[str, list[tuple[float, float]]]:
    """Per kind, each round's (median, p99) wall ms per call."""
    from bench import django_tasks_jobs as bench_tasks
    from jobs.audit import Actor
    from jobs.guard.runner import execute_run
    from jobs.models import JobRun, RunStatus
    from jobs.schedule.kinds import Triggered
    from jobs.services import JobDefinition, create_job

    for name, task in ((bench_tasks.noop.module_path, None), ("guarded", bench_tasks.guarded_noop)):
        policies = {"queue": QUEUE, "overlap": "wait", "start_deadline": 3600}
        definition = JobDefinition(
            name=name,
            task=bench_tasks.noop.module_path if task is None else task.name,
            schedule=Triggered(),
            args=[] if task is None else [0],
            policies=policies,
        )
        create_job(definition, actor=Actor.code("bench"))
    made: dict[str, list[int]] = {"run enqueued": [], "run delayed": []}

    def enqueue(i: int) -> None:
        made["run enqueued"].append(_run_id(bench_tasks.noop.enqueue(i)))

    def db_enqueue(i: int) -> None:
        bench_tasks.db_noop.enqueue(i)

    def delay(i: int) -> None:
        made["run delayed"].append(
            int(bench_tasks.guarded_noop.delay(i).id.removeprefix("jobrun-"))
        )

    from celery import current_app
    from django.utils import timezone

    from jobs.models import Job, Trigger

    floor_job = Job.objects.get(name="guarded")

    def floor(i: int) -> None:
        run = JobRun.objects.create(
            job=floor_job, scheduled_for=timezone.now(), trigger=Trigger.CALL, args=[i]
        )
        current_app.send_task(
            bench_tasks.plain_noop.name, args=[i], queue=QUEUE, task_id=f"jobrun-{run.pk}"
        )

    def celery_delay(i: int) -> None:
        bench_tasks.plain_noop.apply_async((i,), queue=QUEUE)

    def runs_of(kind: str) -> Callable[[int], object]:
        def run(i: int) -> None:
            run_id = made[kind][i]
            execute_run(run_id, task_id=f"jobrun-{run_id}", node="bench")

        return run

    once = {
        "enqueue": enqueue,
        "db enqueue": db_enqueue,
        "delay": delay,
        "floor": floor,
        "celery delay": celery_delay,
        **{k: runs_of(k) for k in made},
    }
    results: dict[str, list[tuple[float, float]]] = {kind: [] for kind in KINDS}
    for round_ in range(rounds + 1):  # the first round warms up
        for made_runs in made.values():
            made_runs.clear()
        for kind in KINDS:
            walls = _timed(calls, once[kind])
            if round_:
                results[kind].append((statistics.median(walls), percentile(walls, 99)))
            print(f"  round {round_}: {kind} {statistics.median(walls):.3f} ms", flush=True)
        ids = [run_id for made_runs in made.values() for run_id in made_runs]
        ran = set(JobRun.objects.filter(pk__in=ids).values_list("status", flat=True))
        JobRun.objects.filter(job=floor_job, status=RunStatus.SCHEDULED).delete()  # the floor's
        if ran != {RunStatus.SUCCEEDED}:
            raise AssertionError(f"runs did not all succeed: {ran}")
        _db_results().delete()  # django-tasks-db's, never run (no worker here)
    return results


def _db_results() -> Any:
    from django_tasks_db.models import DBTaskResult  # type: ignore[import-not-found,unused-ignore]

    return DBTaskResult.objects.filter(backend_name="db")


def throughput(tasks: int, rounds: int, database_url: str) -> dict[str, list[tuple[float, float]]]:
    """Per flow, each round's (enqueued per second, completed per second) with the workers
    running."""
    from bench import django_tasks_jobs as bench_tasks
    from jobs.models import JobRun, RunStatus

    logs = Path(tempfile.mkdtemp(prefix="django-tasks-bench-"))
    print(f"  throughput: worker logs in {logs}", flush=True)
    processes = Processes(_worker_env(database_url), logs, grace=20)
    broker = bench_tasks._broker()
    counters: list[str] = []
    made: list[Any] = []

    def ours(i: int) -> None:
        made.append(_run_id(bench_tasks.noop.enqueue(i)))

    def db(i: int) -> None:
        made.append(bench_tasks.db_noop.enqueue(i).id)

    def celery(i: int) -> None:
        bench_tasks.counted_noop.apply_async((counters[-1],), queue=QUEUE)

    def done_ours() -> int:
        return JobRun.objects.filter(pk__in=made, status=RunStatus.SUCCEEDED).count()

    def done_db() -> int:
        return int(_db_results().filter(id__in=made, status="SUCCESSFUL").count())

    def done_celery() -> int:
        return int(broker.get(counters[-1]) or 0)

    flows = {
        "enqueue": (ours, done_ours),
        "db enqueue": (db, done_db),
        "celery delay": (celery, done_celery),
    }
    results: dict[str, list[tuple[float, float]]] = {flow: [] for flow in FLOWS}
    try:
        processes.start(
            "celery-worker",
            [
                *CELERY,
                "worker",
                "-Q",
                QUEUE,
                "-c",
                "2",
                "-l",
                "warning",
                "-n",
                f"django-tasks-bench-{uuid.uuid4().hex[:6]}@%h",
            ],
        )
        for n in range(2):
            processes.start(
                f"db-worker-{n}",
                [
                    sys.executable,
                    "manage.py",
                    "db_worker",
                    "--backend",
                    "db",
                    "--interval",
                    "0.1",
                    "--no-startup-delay",
                    "--no-reload",
                    "-v",
                    "0",
                ],
            )
        for round_ in range(rounds + 1):  # the first round warms up (and waits for the workers)
            for flow in FLOWS:
                made.clear()
                counters.append(f"{QUEUE}-count-{uuid.uuid4().hex}")
                call, done = flows[flow]
                started = time.perf_counter()
                for i in range(tasks):
                    call(i)
                enqueued = time.perf_counter() - started
                deadline = time.monotonic() + (120 if not round_ else 30) + tasks / 20
                while done() < tasks:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{flow}: {done()} of {tasks} done; logs in {logs}")
                    time.sleep(0.02)
                completed = time.perf_counter() - started
                if round_:
                    results[flow].append((tasks / enqueued, tasks / completed))
                print(
                    f"  round {round_}: {flow} {tasks / enqueued:.0f} enqueued/s, "
                    f"{tasks / completed:.0f} completed/s",
                    flush=True,
                )
    finally:
        processes.stop_all()
        if counters:
            broker.delete(*counters)
    return results


def _worker_env(database_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=database_url,
        JOBS_MODULES="bench.django_tasks_jobs",
        # Production settings for the workers: debug mode records every query they make.
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY="django-tasks-bench-only-" + uuid.uuid4().hex + uuid.uuid4().hex,
        DJANGO_ALLOWED_HOSTS="localhost",
        DJANGO_SETTINGS_MODULE=SETTINGS,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    return env


def table(results: dict[str, list[tuple[float, float]]], calls: int) -> str:
    lines = [
        f"| per call, {calls} calls x {len(results['enqueue'])} rounds, one process, no worker "
        "| median ms | p99 ms | median / floor |",
        "| --- | --- | --- | --- |",
    ]
    floor = statistics.median(r[0] for r in results["floor"])
    for kind in KINDS:
        median = statistics.median(r[0] for r in results[kind])
        p99 = statistics.median(r[1] for r in results[kind])
        lines.append(f"| {LABELS[kind]} | {median:.3f} | {p99:.3f} | {median / floor:.2f}x |")
    ratios = ", ".join(
        f"{kind} {statistics.median(r[0] for r in results[kind]) / floor:.2f}x"
        for kind in ("enqueue", "db enqueue", "delay", "celery delay")
    )
    lines += ["", f"Median per call against the floor (one INSERT + one publish): {ratios}."]
    return "\n".join(lines)


def throughput_table(results: dict[str, list[tuple[float, float]]], tasks: int) -> str:
    rounds = len(results["enqueue"])
    lines = [
        f"| {tasks} tasks x {rounds} rounds, workers running | enqueued/s (median) "
        "| completed/s (median) | each round's completed/s |",
        "| --- | --- | --- | --- |",
    ]
    for flow in FLOWS:
        enqueued = statistics.median(r[0] for r in results[flow])
        completed = statistics.median(r[1] for r in results[flow])
        each = ", ".join(f"{r[1]:.0f}" for r in results[flow])
        label = FLOW_LABELS[flow]
        lines.append(f"| {label} | {enqueued:.0f} | {completed:.0f} | {each} |")
    return "\n".join(lines)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _purge() -> None:
    from celery import current_app

    with current_app.connection_for_write() as connection:
        channel: Any = connection.default_channel
        channel.queue_purge(QUEUE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.django_tasks_bench")
    parser.add_argument("--calls", type=int, default=1000, help="calls per kind and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--tasks", type=int, default=500, help="tasks per flow and round with workers (0: none)"
    )
    args = parser.parse_args(argv)
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    print(f"load average at the start: {_load()}", flush=True)
    with django_on_fresh_database("_django_tasks", "bench.django_tasks_jobs") as database_url:
        _log_to_nowhere()
        try:
            results = measure(args.calls, args.rounds)
            _purge()
            flows = throughput(args.tasks, args.rounds, database_url) if args.tasks else None
        finally:
            _purge()
    print()
    print(table(results, args.calls))
    if flows:
        print()
        print(throughput_table(flows, args.tasks))
    print(f"\nload average at the end: {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
