"""Retention at a sustained rate: does pruning keep the run table and its indexes from growing?

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/jobs \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/4 \\
        .venv/bin/python -m bench.retention_bench   # [--rate 50] [--minutes 30] [--keep-for 2m]

In its own database (created afresh, dropped at the end): 100 jobs whose runs are made at
``--rate`` runs a second by the real statements of a run's life (the beat's slot insert, the
worker's claim with its lease, the fenced finish with its release), while retention
(``jobs.upkeep.retention.prune``, what maintenance calls every ``JOBS_RETENTION_INTERVAL``)
runs every ``--prune-every`` seconds with succeeded runs kept ``--keep-for``. Every
``--sample-every`` seconds it records the run table's rows, heap and index sizes and dead
tuples, and the time each prune took. Autovacuum is PostgreSQL's default.

The table reaches its steady size once runs older than ``--keep-for`` are being deleted as fast
as new ones come; what matters is whether it stays there (a table or index that keeps growing
at a steady row count is bloat that vacuum does not reclaim).
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.databases import django_on_fresh_database

JOBS = 100

_SIZES = """
SELECT (SELECT count(*) FROM jobs_jobrun),
       pg_relation_size('jobs_jobrun'),
       pg_indexes_size('jobs_jobrun'),
       (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'jobs_jobrun'),
       (SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = 'jobs_jobrun'),
       pg_total_relation_size('jobs_lease'),
       pg_total_relation_size('jobs_runrollup')
"""


def _make_jobs() -> list[int]:
    from jobs.audit import Actor
    from jobs.schedule.kinds import Every
    from jobs.services import JobDefinition, create_job

    return [
        create_job(
            JobDefinition(name=f"bench.job-{n:03d}", task="bench.noop", schedule=Every(3600)),
            actor=Actor.code("bench"),
        ).pk
        for n in range(JOBS)
    ]


def _writer(job_ids: list[int], rate: float, stop: threading.Event, made: list[int]) -> None:
    """Runs at ``rate`` a second, each through insert, claim + lease, finish + release."""
    from django.db import connection
    from django.utils import timezone

    from jobs.beat import slot_records
    from jobs.guard import run_records
    from jobs.models import RunStatus

    began = time.monotonic()
    count = 0
    try:
        while not stop.is_set():
            due = int((time.monotonic() - began) * rate) - count
            if due <= 0:
                stop.wait(0.01)
                continue
            slot = timezone.now()
            pairs = [(job_ids[(count + n) % len(job_ids)], slot) for n in range(due)]
            # Distinct slots per job: a job's runs a microsecond apart when it comes twice.
            pairs = [(job, slot + timedelta(microseconds=n)) for n, (job, _) in enumerate(pairs)]
            for new in slot_records.insert_scheduled(pairs):
                claim = run_records.claim(
                    new.run_id, node="bench", pid=1, task_id="t", holder="bench:1"
                )
                assert claim is not None and claim.lease is not None
                run_records.finish_fenced(
                    new.run_id,
                    key=claim.lease.key,
                    token=claim.lease.token,
                    status=RunStatus.SUCCEEDED,
                )
            count += due
            made[0] = count
    finally:
        connection.close()


def _pruner(keep_for: timedelta, every: float, stop: threading.Event, took: list[float]) -> None:
    from django.db import connection

    from jobs.models import TERMINAL_STATUSES
    from jobs.upkeep import retention

    policy: dict[str, timedelta | None] = {str(status): keep_for for status in TERMINAL_STATUSES}
    try:
        while not stop.wait(every):
            started = time.perf_counter()
            retention.prune(retention=policy)
            took.append(time.perf_counter() - started)
    finally:
        connection.close()


def run(rate: float, minutes: float, keep_for: timedelta, prune_every: float, every: float) -> Any:
    from django.db import connection

    job_ids = _make_jobs()
    stop = threading.Event()
    made = [0]
    took: list[float] = []
    threads = [
        threading.Thread(target=_writer, args=(job_ids, rate, stop, made), daemon=True),
        threading.Thread(target=_pruner, args=(keep_for, prune_every, stop, took), daemon=True),
    ]
    for thread in threads:
        thread.start()
    samples = []
    began = time.monotonic()
    try:
        while time.monotonic() - began < minutes * 60:
            time.sleep(every)
            with connection.cursor() as cursor:
                cursor.execute(_SIZES)
                rows, heap, index, dead, vacuums, lease, rollup = cursor.fetchone()
            elapsed = time.monotonic() - began
            samples.append(
                {
                    "minute": elapsed / 60,
                    "made": made[0],
                    "rate": made[0] / elapsed,
                    "rows": rows,
                    "heap_mb": heap / 2**20,
                    "index_mb": index / 2**20,
                    "dead": dead,
                    "autovacuums": vacuums,
                    "lease_kb": lease / 1024,
                    "rollup_kb": rollup / 1024,
                }
            )
            s = samples[-1]
            print(
                f"  {s['minute']:5.1f} min: {s['made']:,} runs made ({s['rate']:.1f}/s), "
                f"{rows:,} in the table, heap {s['heap_mb']:.2f} MB, indexes "
                f"{s['index_mb']:.2f} MB, {dead:,} dead, {vacuums} autovacuums",
                flush=True,
            )
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    return samples, took


def report(samples: list[dict[str, Any]], took: list[float], keep_for: timedelta) -> str:
    lines = [
        "| minute | runs made (rate) | rows in the table | heap MB | indexes MB | dead tuples |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    step = max(1, len(samples) // 10)
    for s in samples[step - 1 :: step]:
        lines.append(
            f"| {s['minute']:.0f} | {s['made']:,} ({s['rate']:.1f}/s) | {s['rows']:,} "
            f"| {s['heap_mb']:.2f} | {s['index_mb']:.2f} | {s['dead']:,} |"
        )
    # Steady state: from twice the retention window on.
    settled = [s for s in samples if s["minute"] * 60 >= 2 * keep_for.total_seconds()]
    if len(settled) >= 2:
        first, last = settled[0], settled[-1]
        lines.append("")
        lines.append(
            f"From minute {first['minute']:.0f} to {last['minute']:.0f}: rows "
            f"{first['rows']:,} → {last['rows']:,}, heap {first['heap_mb']:.2f} → "
            f"{last['heap_mb']:.2f} MB (max {max(s['heap_mb'] for s in settled):.2f}), indexes "
            f"{first['index_mb']:.2f} → {last['index_mb']:.2f} MB "
            f"(max {max(s['index_mb'] for s in settled):.2f}); "
            f"{len(took)} prunes, median {statistics.median(took) * 1000:.0f} ms, "
            f"max {max(took) * 1000:.0f} ms."
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from jobs.schedule.kinds import parse_duration

    parser = argparse.ArgumentParser(prog="python -m bench.retention_bench")
    parser.add_argument("--rate", type=float, default=50.0, help="runs made per second")
    parser.add_argument("--minutes", type=float, default=30.0, help="how long")
    parser.add_argument("--keep-for", default="2m", help="retention of finished runs")
    parser.add_argument("--prune-every", type=float, default=30.0, help="seconds between prunes")
    parser.add_argument("--sample-every", type=float, default=30.0, help="seconds between samples")
    args = parser.parse_args(argv)

    keep_for = parse_duration(args.keep_for)
    with django_on_fresh_database("_retention_bench", "bench.pages_jobs"):
        samples, took = run(args.rate, args.minutes, keep_for, args.prune_every, args.sample_every)
    print()
    print(
        f"retention benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPU(s): "
        f"{args.rate:g} runs/s for {args.minutes:g} min, kept {args.keep_for}, "
        f"pruned every {args.prune_every:g} s"
    )
    print(report(samples, took, keep_for))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
