"""What keeping a run's log costs: a guarded run whose job logs 10 lines, with the run log on
and off, in one process.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/jobs \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/4 \\
        .venv/bin/python -m bench.run_log_bench [--runs 1000] [--rounds 5] [--lines 10]

As ``bench.guard_cost`` does for the guard, one process calls ``jobs.guard.runner.execute_run``
for ``--runs`` scheduled runs of the same job (``bench.talk``: ``--lines`` ``logging`` lines a
run, spread over 50 jobs; ``bench/run_log_jobs.py``), alternating by round between:

- **off**: ``JOBS_RUN_LOG=0``: the lines go to the process's handlers only;
- **on**: the default: the lines are also caught, redacted, and written by the run log's thread
  on its own connection; the run's end waits for its last lines.

Per kind: the throughput of each round (runs / wall seconds) and the median per-run wall time;
the ratio on/off is taken per round (so both kinds of a round share the machine's mood), and
the table gives the median of the rounds. It works in its own database
(``<DATABASE_URL's name>_run_log``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

from bench.databases import django_on_fresh_database
from bench.guard_cost import _log_to_nowhere
from bench.measure import percentile

JOBS = 50


def measure(runs: int, rounds: int, lines: int) -> dict[str, list[tuple[float, float, float]]]:
    """Per kind, each round's (runs a second, median wall ms a run, p99 wall ms a run)."""
    from django.conf import settings
    from django.utils import timezone

    from jobs.conf import get_run_log_conf
    from jobs.guard.runner import execute_run
    from jobs.models import Job, JobRun, RunLogLine, RunStatus, Trigger
    from jobs.values.names import stored_skeleton

    jobs = Job.objects.bulk_create(
        Job(
            name=f"bench-{i}",
            name_skeleton=stored_skeleton(f"bench-{i}"),
            task="bench.talk",
            kwargs={"lines": lines},
        )
        for i in range(JOBS)
    )

    def rounds_of(enabled: bool) -> Callable[[], tuple[float, float, float]]:
        def once() -> tuple[float, float, float]:
            settings.JOBS_RUN_LOG = enabled
            get_run_log_conf.cache_clear()
            now = timezone.now()
            ids = [
                run.pk
                for run in JobRun.objects.bulk_create(
                    JobRun(job=jobs[i % JOBS], scheduled_for=now, trigger=Trigger.MANUAL)
                    for i in range(runs)
                )
            ]
            walls = []
            started = time.perf_counter()
            for run_id in ids:
                begun = time.perf_counter()
                execute_run(run_id, task_id=f"t{run_id}", node="bench")
                walls.append((time.perf_counter() - begun) * 1000)
            elapsed = time.perf_counter() - started
            statuses = set(JobRun.objects.filter(pk__in=ids).values_list("status", flat=True))
            if statuses != {RunStatus.SUCCEEDED}:
                raise AssertionError(f"runs did not succeed: {statuses}")
            kept = RunLogLine.objects.filter(run_id__in=ids).count()
            if kept != (runs * lines if enabled else 0):
                raise AssertionError(f"{kept} lines kept for {runs} runs of {lines} lines")
            return runs / elapsed, statistics.median(walls), percentile(walls, 99)

        return once

    kinds = (("off", rounds_of(False)), ("on", rounds_of(True)))
    for _, once in kinds:  # warm up: connections, prepared statements, the writer's thread
        once()
    results: dict[str, list[tuple[float, float, float]]] = {kind: [] for kind, _ in kinds}
    for round_ in range(rounds):
        for kind, once in kinds:
            rate, median, p99 = once()
            results[kind].append((rate, median, p99))
            print(f"  round {round_ + 1}: {kind} {rate:.0f} runs/s ({median:.3f} ms)", flush=True)
    return results


def table(results: dict[str, list[tuple[float, float, float]]], runs: int, lines: int) -> str:
    rounds = len(results["off"])
    ratios = [on[0] / off[0] for on, off in zip(results["on"], results["off"], strict=True)]
    out = [
        f"| {runs} runs of {lines} lines x {rounds} rounds, one process | runs/s (median) "
        "| wall median ms | wall p99 ms |",
        "| --- | --- | --- | --- |",
    ]
    for kind, label in (("off", "run log off (JOBS_RUN_LOG=0)"), ("on", "run log on")):
        rate = statistics.median(r[0] for r in results[kind])
        wall = statistics.median(r[1] for r in results[kind])
        p99 = statistics.median(r[2] for r in results[kind])
        out.append(f"| {label} | {rate:.0f} | {wall:.3f} | {p99:.3f} |")
    extra = statistics.median(r[1] for r in results["on"]) - statistics.median(
        r[1] for r in results["off"]
    )
    out.append(
        f"\nThroughput with the run log on: {statistics.median(ratios):.2f}x the throughput "
        f"with it off (median of the rounds' ratios: {', '.join(f'{r:.2f}' for r in ratios)}); "
        f"{extra:.3f} ms more a run."
    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run_log_bench")
    parser.add_argument("--runs", type=int, default=1000, help="runs per kind and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lines", type=int, default=10, help="lines each run logs")
    args = parser.parse_args(argv)
    with django_on_fresh_database("_run_log", "bench.run_log_jobs"):
        _log_to_nowhere()
        try:
            results = measure(args.runs, args.rounds, args.lines)
        finally:
            from jobs.runlog.writer import WRITER

            WRITER.shutdown()  # its connection closed before the database is dropped
    print()
    print(table(results, args.runs, args.lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
