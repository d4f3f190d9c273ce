"""A guarded run's own cost, without Celery: ``execute_run`` against the floor, in one process.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/jobs \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/4 \\
        .venv/bin/python -m bench.guard_cost [--runs 2000] [--rounds 5]

``bench.lease_bench`` measures guarded runs through a real ``celery worker``: the figure users
see, but Celery's own work (a few times a run's) and a 2-core machine's moods make rounds vary
by up to 30%, too much to see a change of a tenth of a millisecond. Here one process calls, on
one connection, ``n`` times each, alternating by round:

- **floor**: the floor task's body (``lease_bench.floor_run``): a bare conditional ``UPDATE``
  commit, the no-op, another;
- **run row**: the floor's body against a scheduled run's own row (``lease_bench.run_row_floor``:
  bare ``UPDATE`` commits moving it to ``running`` and then to ``succeeded`` around the no-op),
  so with the run table's indexes and deferred triggers but no lease, no fence and no runner;
- **guarded**: ``jobs.guard.runner.execute_run`` of a scheduled run of the guarded no-op
  (``bench.noop``, spread over 50 jobs): the claim with its lease, the call, the fenced finish.

The run row splits a guarded run's extra over the floor in two: what recording a run's two
states in the run table costs whatever writes them, and what the guard itself adds (the lease,
the fence, the PL/pgSQL functions and the runner's Python).

Per run: the wall time (median and p99 of the rounds' per-run medians and p99s), and this
process's CPU time (so the client's Python; the rest of the wall time is the database's work and
the round trips). Diagnoses, not platform settings: ``--without-run-triggers`` disables the run
table's deferred triggers (alerts, dependencies); ``--without-durable-commits`` sets
``synchronous_commit = off`` for the connection, leaving out the commits' WAL flush, which both
kinds pay twice. It works in its own database (``<DATABASE_URL's name>_guard_cost``).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.databases import django_on_fresh_database
from bench.measure import percentile


def _timed(count: int, once: Callable[[int], object]) -> tuple[list[float], float]:
    """``once(i)`` for each i: the wall time of each (ms), and the process's CPU per call (ms)."""
    walls = []
    cpu_started = time.process_time()
    for i in range(count):
        started = time.perf_counter()
        once(i)
        walls.append((time.perf_counter() - started) * 1000)
    return walls, (time.process_time() - cpu_started) * 1000 / count


def measure(runs: int, rounds: int) -> dict[str, list[tuple[float, float, float]]]:
    """Per kind, each round's (median wall ms, p99 wall ms, CPU ms) per run."""
    from django.utils import timezone

    from bench import lease_bench
    from jobs.guard.runner import execute_run
    from jobs.models import Job, JobRun, RunStatus, Trigger
    from jobs.values.names import stored_skeleton

    log = str(Path(tempfile.mkdtemp(prefix="guard-cost-")) / "stamps.log")
    jobs = Job.objects.bulk_create(
        Job(
            name=f"bench-{i}",
            name_skeleton=stored_skeleton(f"bench-{i}"),
            task="bench.noop",
            kwargs={"log": log},
        )
        for i in range(lease_bench.GUARDED_JOBS)
    )
    lease_bench.create_floor_rows()

    def floor() -> tuple[list[float], float]:
        return _timed(runs, lambda i: lease_bench.floor_run(log, i))

    def scheduled_runs() -> list[int]:
        now = timezone.now()
        made = JobRun.objects.bulk_create(
            JobRun(job=jobs[i % len(jobs)], scheduled_for=now, trigger=Trigger.MANUAL)
            for i in range(runs)
        )
        return [run.pk for run in made]

    def each_run(once: Callable[[int], object], what: str) -> tuple[list[float], float]:
        """``once(run id)`` timed for each of ``runs`` new scheduled runs, all succeeded after."""
        ids = scheduled_runs()
        result = _timed(runs, lambda i: once(ids[i]))
        statuses = set(JobRun.objects.filter(pk__in=ids).values_list("status", flat=True))
        if statuses != {RunStatus.SUCCEEDED}:
            raise AssertionError(f"{what} did not succeed: {statuses}")
        return result

    def run_row() -> tuple[list[float], float]:
        return each_run(lambda run_id: lease_bench.run_row_floor(log, run_id), "a run row")

    def guarded() -> tuple[list[float], float]:
        return each_run(
            lambda run_id: execute_run(run_id, task_id=f"t{run_id}", node="bench"), "a guarded run"
        )

    kinds = (("floor", floor), ("run row", run_row), ("guarded", guarded))
    for _, once in kinds:  # warm up: connection, prepared statements, caches
        once()
    results: dict[str, list[tuple[float, float, float]]] = {kind: [] for kind, _ in kinds}
    for round_ in range(rounds):
        for kind, once in kinds:
            walls, cpu = once()
            results[kind].append((statistics.median(walls), percentile(walls, 99), cpu))
            print(
                f"  round {round_ + 1}: {kind} {statistics.median(walls):.3f} ms (cpu {cpu:.3f})",
                flush=True,
            )
    return results


def table(results: dict[str, list[tuple[float, float, float]]], runs: int) -> str:
    floor = statistics.median(r[0] for r in results["floor"])
    floor_cpu = statistics.median(r[2] for r in results["floor"])
    lines = [
        f"| per run, {runs} runs x {len(results['floor'])} rounds, one process | wall median ms"
        " | wall p99 ms | client CPU ms | wall minus client CPU | vs the floor (wall) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for kind, label in (
        ("floor", "floor: two bare UPDATE commits around the no-op"),
        ("run row", "run row: the same two commits moving a run's own row"),
        ("guarded", "guarded run: execute_run (claim + lease, call, fenced finish)"),
    ):
        wall = statistics.median(r[0] for r in results[kind])
        p99 = statistics.median(r[1] for r in results[kind])
        cpu = statistics.median(r[2] for r in results[kind])
        lines.append(
            f"| {label} | {wall:.3f} | {p99:.3f} | {cpu:.3f} | {wall - cpu:.3f} "
            f"| {floor / wall:.2f} |"
        )
    row = statistics.median(r[0] for r in results["run row"])
    row_cpu = statistics.median(r[2] for r in results["run row"])
    guarded = statistics.median(r[0] for r in results["guarded"])
    guarded_cpu = statistics.median(r[2] for r in results["guarded"])
    extra, extra_cpu = guarded - floor, guarded_cpu - floor_cpu
    lines.append(
        f"\nThe guarded run's extra: {extra:.3f} ms a run, {extra_cpu:.3f} ms of it the client's "
        f"CPU and {extra - extra_cpu:.3f} ms the database's work and waiting. Of it, the run "
        f"table {row - floor:.3f} ms (client CPU {row_cpu - floor_cpu:.3f}); the guard itself "
        f"{guarded - row:.3f} ms (client CPU {guarded_cpu - row_cpu:.3f}): the guarded run is "
        f"{row / guarded:.2f}x the run row."
    )
    return "\n".join(lines)


def _log_to_nowhere() -> None:
    """The runner's log lines are made as in a worker, but written to /dev/null, not the
    terminal."""
    nowhere = open(os.devnull, "w")  # noqa: SIM115  (open for the life of the process)
    for name in (None, "jobs", "celery"):
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler, logging.StreamHandler):
                handler.setStream(nowhere)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.guard_cost")
    parser.add_argument("--runs", type=int, default=2000, help="runs per kind and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--without-run-triggers",
        action="store_true",
        help="diagnosis: the run table's deferred triggers (alerts, dependencies) disabled",
    )
    parser.add_argument(
        "--without-durable-commits",
        action="store_true",
        help="diagnosis: synchronous_commit = off, no WAL flush at each commit",
    )
    args = parser.parse_args(argv)
    with django_on_fresh_database("_guard_cost", "bench.lease_bench"):
        from django.db import connection

        from bench import lease_bench

        _log_to_nowhere()
        if args.without_run_triggers:
            lease_bench.disable_run_triggers()
        if args.without_durable_commits:  # for every connection to come (the runner reconnects)
            with connection.cursor() as cursor:
                cursor.execute(
                    f"ALTER DATABASE {connection.ops.quote_name(connection.settings_dict['NAME'])}"
                    " SET synchronous_commit = off"
                )
            connection.close()
        results = measure(args.runs, args.rounds)
    print()
    print(table(results, args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
