"""The beat at scale: ``ClusterScheduler`` against stock django-celery-beat's
``DatabaseScheduler``, measured in the same run on the same jobs.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/jobs \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/4 \\
        .venv/bin/python -m bench.beat_bench [--sizes 1000,10000,100000] [--skip-processes]

It works in its own database, ``<name of DATABASE_URL's database>_beat_bench`` on the same
server (created afresh, dropped at the end), and on queues of its own on the broker (deleted).
Every job is also a ``PeriodicTask`` (that is how a job carries its schedule), so the stock
scheduler reads exactly the same rows.

- **start-up** at each size: constructing the scheduler (ours loads every job and checks what
  is owed; stock loads every entry) plus, for stock, the first tick, which builds its heap.
- **idle tick** at each size: a tick with nothing due (every job's first slot is an hour away).
- **dispatch**: 10k jobs due at the same instant; ours: the one tick that inserts and publishes
  them all. Stock sends one entry per tick; it runs for at most ``--stock-cap`` seconds and the
  time for all 10k is projected from its rate.
- **edit → pickup**: a scheduler ticking on a thread as ``celery beat`` would; the main thread
  adds a job, pauses one, changes one's schedule; the time until the scheduler's entries show it.
- **lag** (real processes: 3 beats + 2 workers, 50 one-second jobs = 50 runs/s for 30 s): ours
  from the run records (``started_at - scheduled_for``, database clock); stock (1 beat, the only
  correct setup for it; and 3 beats, to count what they run) from a probe task's start times.
  Stock interval schedules are not anchored, so it has no slot to measure from; both are also
  given the *period error*: (start - previous start of the same job) - 1 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

from celery import shared_task

from bench.databases import django_on_fresh_database
from bench.measure import append_stamp
from bench.processes import CELERY, Processes, wait_until
from jobs import job

ROOT = Path(__file__).resolve().parents[1]
LAG_JOBS = 50
LAG_SECONDS = 30
# What each beat logs after a tick (jobs.beat.scheduler): the slots it recorded itself.
CREATED_HERE = r"beat fired \d+ slot\(s\): (\d+) created here"


# --- the functions the bench's workers run (they import this module through JOBS_MODULES) ----


@job("bench.beat_noop")
def beat_noop(ctx: Any) -> None:
    """A guarded no-op: its run record has all the bench needs."""


@shared_task(name="bench.stock_probe")
def stock_probe(log: str, job: str) -> None:
    """What stock beat sends: records which entry started when."""
    append_stamp(log, job)


# --- helpers -----------------------------------------------------------------------------------


def percentile(values: list[float], pct: float) -> float:
    """Rounded-index percentile (nan when empty); not bench.measure's nearest-rank one, so the
    figures recorded from this bench keep their meaning."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values) if values else float("nan"),
        "p99": percentile(values, 99),
        "n": len(values),
    }


def _wipe() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE jobs_jobrun, jobs_job, django_celery_beat_periodictask, "
            "django_celery_beat_clockedschedule, jobs_schedulechange, jobs_lease "
            "RESTART IDENTITY CASCADE"
        )


def _future_anchor(minutes: int = 60) -> datetime:
    from django.utils import timezone

    return timezone.now().replace(microsecond=0) + timedelta(minutes=minutes)


def create_jobs(
    count: int,
    *,
    queue: str,
    task: str = "bench.beat_noop",
    every: Callable[[int], int] = lambda n: 3600 * (1 + n % 24),
    anchor: datetime | None = None,
    prefix: str = "bench",
    kwargs: Callable[[int], dict[str, Any]] | None = None,
) -> None:
    """``count`` periodic jobs, each with its beat entry, in bulk (no per-job services call:
    100k jobs the usual way take too long to set up; the rows are the same)."""
    from django.db import transaction
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    from jobs.beat.entries import beat_entry_name
    from jobs.models import Job
    from jobs.values.names import stored_skeleton

    intervals: dict[int, IntervalSchedule] = {}
    with transaction.atomic():
        for n in range(count):
            seconds = every(n)
            if seconds not in intervals:
                intervals[seconds], _ = IntervalSchedule.objects.get_or_create(
                    every=seconds, period=IntervalSchedule.SECONDS
                )
        names = [f"{prefix}-{n}" for n in range(count)]
        tasks = PeriodicTask.objects.bulk_create(
            [
                PeriodicTask(
                    name=beat_entry_name(names[n]),
                    task=task,
                    interval=intervals[every(n)],
                    start_time=anchor,
                    queue=queue,
                    kwargs=json.dumps(kwargs(n) if kwargs else {"job": names[n]}),
                )
                for n in range(count)
            ],
            batch_size=5000,
        )
        Job.objects.bulk_create(
            [
                Job(
                    name=names[n],
                    name_skeleton=stored_skeleton(names[n]),
                    task=task,
                    periodic_task=tasks[n],
                    queue=queue,
                    kwargs=kwargs(n) if kwargs else {},
                )
                for n in range(count)
            ],
            batch_size=5000,
        )


def _ours() -> Any:
    from jobs.beat.scheduler import ClusterScheduler
    from project.celery import app

    return ClusterScheduler(app=app, maintain=False)


def _stock() -> Any:
    from django_celery_beat.schedulers import DatabaseScheduler

    from project.celery import app

    return DatabaseScheduler(app=app)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Beats log every load and fire at INFO; the bench prints its own lines."""
    import logging

    previous = logging.root.manager.disable
    logging.disable(logging.INFO)
    try:
        yield
    finally:
        logging.disable(previous)


# --- start-up and idle tick ------------------------------------------------------------------


def _record_startup_and_idle(
    result: dict[str, Any], scheduler: str, startups: list[float], ticks: list[float]
) -> None:
    """Put one scheduler's start-ups and idle ticks (seconds) in ``result``, and say them."""
    result[f"{scheduler}_startup"] = _summary(startups)
    result[f"{scheduler}_idle_tick"] = _summary(ticks)
    print(
        f"  {scheduler + ':':6} start-up {statistics.median(startups):.3f} s, "
        f"idle tick {statistics.median(ticks) * 1000:.3f} ms",
        flush=True,
    )


def measure_startup_and_idle(count: int, rounds: int, stock_rounds: int) -> dict[str, Any]:

    _wipe()
    started = time.perf_counter()
    create_jobs(count, queue="bench-idle", anchor=_future_anchor())
    print(f"  {count} jobs created in {time.perf_counter() - started:.1f} s", flush=True)
    result: dict[str, Any] = {"jobs": count}

    startups, ticks = [], []
    for _ in range(rounds):
        began = time.perf_counter()
        scheduler = _ours()
        startups.append(time.perf_counter() - began)
        assert len(scheduler._entries) == count, len(scheduler._entries)
        for _ in range(300):
            began = time.perf_counter()
            scheduler.tick()  # as celery beat calls it: with the heartbeat it records
            ticks.append(time.perf_counter() - began)
        del scheduler
    _record_startup_and_idle(result, "ours", startups, ticks)

    startups, ticks = [], []
    tick_count = 50 if count <= 10_000 else 10
    for _ in range(stock_rounds):
        began = time.perf_counter()
        stock = _stock()
        stock.tick()  # the first tick builds its heap
        startups.append(time.perf_counter() - began)
        for _ in range(tick_count):
            began = time.perf_counter()
            stock.tick()
            ticks.append(time.perf_counter() - began)
        stock.close()  # its final sync, while the database still exists
    _record_startup_and_idle(result, "stock", startups, ticks)
    return result


# --- dispatch of simultaneous slots -----------------------------------------------------------


def measure_dispatch(count: int, stock_cap: float) -> dict[str, Any]:
    import redis
    from django.conf import settings
    from django.db import connection
    from django.utils import timezone

    from jobs.models import JobRun

    broker = redis.Redis.from_url(str(settings.CELERY_BROKER_URL))
    queue = f"bench-dispatch-{uuid.uuid4().hex[:8]}"
    _wipe()
    anchor = timezone.now().replace(microsecond=0) + timedelta(seconds=15)
    create_jobs(count, queue=queue, every=lambda n: 600, anchor=anchor)
    result: dict[str, Any] = {"slots": count}
    try:
        scheduler = _ours()
        while timezone.now() < anchor:
            time.sleep(0.01)
        began = time.perf_counter()
        scheduler.tick_at(timezone.now())
        elapsed = time.perf_counter() - began
        created = JobRun.objects.filter(scheduled_for=anchor).count()
        queued = broker.llen(queue)
        assert created == count and queued == count, (created, queued)
        result["ours_seconds"] = elapsed
        print(f"  ours:  {count} slots inserted and published in {elapsed:.2f} s", flush=True)
        del scheduler
        broker.delete(queue)

        # Stock: the same entries, all overdue now. It sends a plain task (our job functions
        # take a run id, which stock beat has no notion of).
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE django_celery_beat_periodictask SET start_time = NULL, "
                "last_run_at = now() - interval '20 minutes', total_run_count = 0, "
                "task = 'bench.stock_probe', "
                "kwargs = json_build_object('log', '/dev/null', 'job', name)::text"
            )
        stock = _stock()
        stock.tick()
        began = time.perf_counter()
        while time.perf_counter() - began < stock_cap and broker.llen(queue) < count:
            stock.tick()
        elapsed = time.perf_counter() - began
        sent = broker.llen(queue)
        result["stock_sent"] = sent
        result["stock_seconds_measured"] = elapsed
        result["stock_seconds_projected"] = elapsed * count / max(sent, 1)
        print(
            f"  stock: {sent} of {count} sent in {elapsed:.1f} s "
            f"(all {count}: ~{result['stock_seconds_projected']:.0f} s)",
            flush=True,
        )
        stock.close()  # its final sync, while the database still exists
    finally:
        broker.delete(queue)
        broker.close()
    return result


def measure_dispatch_with_beats(
    count: int, beats: int, database_url: str, tmp: Path
) -> dict[str, Any]:
    """``count`` slots due at once with ``beats`` real ``celery beat`` processes: the time from
    the slot until the last message is in the broker, and how the beats shared the work."""
    import re

    import redis
    from django.conf import settings
    from django.utils import timezone

    from jobs.models import JobRun

    broker = redis.Redis.from_url(str(settings.CELERY_BROKER_URL))
    queue = f"bench-dispatch-{uuid.uuid4().hex[:8]}"
    _wipe()
    processes = Processes(_process_env(database_url), tmp, grace=20)
    try:
        for n in range(beats):
            processes.start(f"dispatch-beat-{n}", [*CELERY, "beat", "-l", "info"])
        wait_until(
            lambda: all("beat loaded" in processes.log(f"dispatch-beat-{n}") for n in range(beats)),
            120,
            "beats started",
        )
        anchor = timezone.now().replace(microsecond=0) + timedelta(seconds=20)
        create_jobs(count, queue=queue, every=lambda n: 600, anchor=anchor)
        while timezone.now() < anchor:
            time.sleep(0.005)
        while broker.llen(queue) < count and timezone.now() < anchor + timedelta(seconds=300):
            time.sleep(0.005)
        elapsed = (timezone.now() - anchor).total_seconds()
        assert JobRun.objects.filter(scheduled_for=anchor).count() == count
        assert broker.llen(queue) == count

        def shares_logged() -> list[int]:
            return [
                sum(int(x) for x in re.findall(CREATED_HERE, processes.log(f"dispatch-beat-{n}")))
                for n in range(beats)
            ]

        # A beat logs its share once its tick ends, after the messages are out: wait for it.
        wait_until(lambda: sum(shares_logged()) == count, 30, "each beat's share logged")
        shares = shares_logged()
    finally:
        processes.stop_all()
        broker.delete(queue)
        broker.close()
    print(
        f"  ours, {beats} beat processes: {count} slots out in {elapsed:.2f} s; shares {shares}",
        flush=True,
    )
    return {"beats": beats, "seconds": elapsed, "shares": shares}


def _process_env(database_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=database_url,
        JOBS_MODULES="bench.beat_bench",
        DJANGO_DEBUG="1",
        DJANGO_SETTINGS_MODULE="project.settings",
        PYTHONPATH=str(ROOT),
    )
    return env


# --- edit to pickup ---------------------------------------------------------------------------


class _Ticking:
    """A scheduler ticking on a thread, sleeping what each tick asks, as ``celery beat`` does."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self.scheduler: Any = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Ticking:
        self._thread.start()
        self._ready.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)

    def _run(self) -> None:
        from django.db import connection

        from project.celery import app

        app.set_current()
        try:
            self.scheduler = self._make()
            self._ready.set()
            while not self._stop.is_set():
                interval = self.scheduler.tick()
                if interval and interval > 0:
                    self._stop.wait(interval)
        finally:
            self._ready.set()
            connection.close()


def _until(condition: Callable[[], bool], timeout: float) -> float:
    began = time.perf_counter()
    while not condition():
        if time.perf_counter() - began > timeout:
            return float("inf")
        time.sleep(0.0005)
    return time.perf_counter() - began


def measure_pickup(count: int, rounds: int, stock_rounds: int) -> dict[str, Any]:
    """Needs ``count`` jobs in place (``measure_startup_and_idle`` leaves them)."""
    import random

    from jobs import services
    from jobs.audit import Actor
    from jobs.models import Job
    from jobs.schedule.kinds import Every
    from jobs.services import JobDefinition

    anchor = _future_anchor()
    result: dict[str, Any] = {"jobs": count}
    for kind, make, n, base in (("ours", _ours, rounds, 0), ("stock", _stock, stock_rounds, 500)):
        latencies: dict[str, list[float]] = defaultdict(list)
        with _ticking(make) as ticking:
            schedule_of = _entry_probe(kind, ticking)

            def pickup(
                name: str, expected: object, probe: Callable[[str], Any] = schedule_of
            ) -> float:
                return _until(lambda: probe(name) == expected, 300)

            for round_ in range(n):
                time.sleep(random.uniform(0, 1))  # a random phase of the tick cycle
                added = f"edit-{kind}-{round_}"
                services.create_job(
                    JobDefinition(added, "bench.beat_noop", Every(3600, anchor=anchor)),
                    actor=Actor.code("bench"),
                )
                latencies["add"].append(pickup(added, 3600))
                time.sleep(random.uniform(0, 1))
                paused = f"bench-{base + round_}"
                services.pause(paused, actor=Actor.code("bench"))
                latencies["pause"].append(pickup(paused, None))
                time.sleep(random.uniform(0, 1))
                edited = Job.objects.get(name=f"bench-{count - 1 - base - round_}")
                services.save_job(edited, Every(7200, anchor=anchor), actor=Actor.code("bench"))
                latencies["reschedule"].append(pickup(edited.name, 7200))
        for edit, values in latencies.items():
            result[f"{kind}_{edit}"] = _summary(values)
        every = [value for values in latencies.values() for value in values]
        result[f"{kind}_all"] = _summary(every)
        print(
            f"  {kind}: edit → pickup median {statistics.median(every) * 1000:.0f} ms, "
            f"max {max(every) * 1000:.0f} ms over {len(every)} edits",
            flush=True,
        )
    return result


@contextlib.contextmanager
def _ticking(make: Callable[[], Any]) -> Iterator[_Ticking]:
    with _Ticking(make) as ticking:
        yield ticking


def _entry_probe(kind: str, ticking: _Ticking) -> Callable[[str], Any]:
    """What the running scheduler holds for a job name: its interval in seconds (or any
    schedule), or None when it does not schedule the job."""
    from jobs.beat.entries import beat_entry_name
    from jobs.models import Job
    from jobs.schedule.kinds import Every

    if kind == "ours":
        ids: dict[str, int] = {}

        def ours(name: str) -> Any:
            if name not in ids:
                found = Job.objects.filter(name=name).values_list("pk", flat=True).first()
                if found is None:
                    return None
                ids[name] = found
            entry = ticking.scheduler._entries.get(ids[name])
            if entry is None:
                return None
            schedule = entry.schedule
            return schedule.seconds if isinstance(schedule, Every) else schedule

        return ours

    def stock(name: str) -> Any:
        entry = ticking.scheduler._schedule.get(beat_entry_name(name))
        if entry is None:
            return None
        return int(entry.schedule.run_every.total_seconds())

    return stock


# --- lag with real processes -----------------------------------------------------------------


def _period_errors(starts: dict[str, list[float]]) -> list[float]:
    errors: list[float] = []
    for times in starts.values():
        ordered = sorted(times)
        errors.extend(b - a - 1.0 for a, b in pairwise(ordered))
    return errors


def measure_lag(database_url: str, tmp: Path) -> dict[str, Any]:
    from django.utils import timezone

    from jobs.models import JobRun

    env = _process_env(database_url)
    worker = ["worker", "-c", "4", "-l", "info", "--without-gossip", "--without-mingle"]
    result: dict[str, Any] = {"jobs": LAG_JOBS, "seconds": LAG_SECONDS}

    # Ours: 3 beats, 2 workers.
    _wipe()
    queue = f"bench-lag-{uuid.uuid4().hex[:8]}"
    processes = Processes(env, tmp, grace=20)
    try:
        for n in (1, 2, 3):
            processes.start(f"beat-{n}", [*CELERY, "beat", "-l", "info"])
        for n in (1, 2):
            processes.start(f"worker-{n}", [*CELERY, *worker, "-n", f"bench{n}@%h", "-Q", queue])
        wait_until(
            lambda: (
                all("beat loaded" in processes.log(f"beat-{n}") for n in (1, 2, 3))
                and all(" ready." in processes.log(f"worker-{n}") for n in (1, 2))
            ),
            120,
            "beats and workers started",
        )
        create_jobs(LAG_JOBS, queue=queue, every=lambda n: 1, prefix="lag")
        window_start = timezone.now() + timedelta(seconds=5)
        window_end = window_start + timedelta(seconds=LAG_SECONDS)
        wait_until(lambda: timezone.now() > window_end + timedelta(seconds=5), 120, "the window")
        runs = list(
            JobRun.objects.filter(
                scheduled_for__gte=window_start, scheduled_for__lt=window_end
            ).values_list("job_id", "scheduled_for", "started_at", "status", "dispatched_at")
        )
    finally:
        processes.stop_all()
    lags = [(started - slot).total_seconds() for _, slot, started, _, _ in runs if started]
    # The beat's part: from the slot to the insert that precedes the publish (database clock).
    dispatch_lags = [(sent - slot).total_seconds() for _, slot, _, _, sent in runs if sent]
    starts: dict[str, list[float]] = defaultdict(list)
    for job_id, _, started, _, _ in runs:
        if started:
            starts[str(job_id)].append(started.timestamp())
    expected = LAG_JOBS * LAG_SECONDS
    statuses: dict[str, int] = defaultdict(int)
    for *_, status, _ in runs:
        statuses[status] += 1
    result["ours_lag"] = _summary(lags)
    result["ours_dispatch_lag"] = _summary(dispatch_lags)
    result["ours_period_error"] = _summary(_period_errors(starts))
    result["ours_runs_per_expected"] = len(runs) / expected
    result["ours_statuses"] = dict(statuses)
    print(
        f"  ours (3 beats): lag p50 {result['ours_lag']['median'] * 1000:.0f} ms, "
        f"p99 {result['ours_lag']['p99'] * 1000:.0f} ms; {len(runs)} runs for {expected} slots "
        f"{dict(statuses)}",
        flush=True,
    )

    # Stock: the same 50 entries sending a probe; 1 beat, then 3 beats.
    for beats in (1, 3):
        starts = _stock_starts(env, tmp, worker, beats)
        count = sum(len(times) for times in starts.values())
        result[f"stock{beats}_period_error"] = _summary(_period_errors(starts))
        result[f"stock{beats}_runs_per_expected"] = count / expected
        print(
            f"  stock ({beats} beat{'s' if beats > 1 else ''}): {count} runs in the window "
            f"for {expected} expected; period error p50 "
            f"{result[f'stock{beats}_period_error']['median'] * 1000:.0f} ms",
            flush=True,
        )
    return result


def _stock_starts(
    env: dict[str, str], tmp: Path, worker: list[str], beats: int
) -> dict[str, list[float]]:
    """Stock beats and 2 workers on the 50 probe entries: start times per entry in a window."""
    _wipe()
    queue = f"bench-lag-{uuid.uuid4().hex[:8]}"
    log = tmp / f"stock-{beats}.log"
    processes = Processes(env, tmp, grace=20)
    workers = [f"stock-worker-{beats}-{n}" for n in (1, 2)]
    try:
        for n, name in enumerate(workers):
            processes.start(name, [*CELERY, *worker, "-n", f"s{n}@%h", "-Q", queue])
        wait_until(
            lambda: all(" ready." in processes.log(name) for name in workers),
            120,
            "workers started",
        )
        create_jobs(
            LAG_JOBS,
            queue=queue,
            task="bench.stock_probe",
            every=lambda n: 1,
            prefix="stock",
            kwargs=lambda n: {"log": str(log), "job": f"stock-{n}"},
        )
        for n in range(beats):
            processes.start(
                f"stock-beat-{beats}-{n}",
                [*CELERY, "beat", "-l", "info", "-S",
                 "django_celery_beat.schedulers:DatabaseScheduler"],
            )  # fmt: skip
        wait_until(log.exists, 120, "the first stock run")
        window_start = time.time() + 5
        window_end = window_start + LAG_SECONDS
        wait_until(lambda: time.time() > window_end + 3, 120, "the window")
    finally:
        processes.stop_all()
    starts: dict[str, list[float]] = defaultdict(list)
    for line in log.read_text().splitlines():
        name, stamp = line.split()
        if window_start <= float(stamp) < window_end:
            starts[name].append(float(stamp))
    return starts


# --- report -----------------------------------------------------------------------------------


def _ms(value: float) -> str:
    return f"{value * 1000:.2f} ms" if value < 1 else f"{value:.2f} s"


def _ratio(stock: float, ours: float) -> str:
    if ours <= 0:
        return "-"
    ratio = stock / ours
    return f"{ratio:.0f}x" if ratio >= 10 else f"{ratio:.1f}x"


def report(results: dict[str, Any]) -> str:
    lines = [
        "| measure | jobs | ClusterScheduler median (p99) | stock DatabaseScheduler median "
        "(p99) | stock / ours |",
        "| --- | --- | --- | --- | --- |",
    ]
    for size in results.get("sizes", []):
        for what, key in (("start-up", "startup"), ("idle tick", "idle_tick")):
            ours, stock = size[f"ours_{key}"], size[f"stock_{key}"]
            lines.append(
                f"| {what} | {size['jobs']:,} | {_ms(ours['median'])} ({_ms(ours['p99'])}) | "
                f"{_ms(stock['median'])} ({_ms(stock['p99'])}) | "
                f"{_ratio(stock['median'], ours['median'])} |"
            )
    dispatch = results.get("dispatch")
    if dispatch:
        projected, ours_seconds = dispatch["stock_seconds_projected"], dispatch["ours_seconds"]
        lines.append(
            f"| {dispatch['slots']:,} slots due at once, all out | {dispatch['slots']:,} | "
            f"{_ms(ours_seconds)} | {dispatch['stock_sent']:,} sent in "
            f"{dispatch['stock_seconds_measured']:.0f} s: ~{projected:.0f} s projected | "
            f"{_ratio(projected, ours_seconds)} |"
        )
    beats = results.get("dispatch_beats")
    if beats and dispatch:
        lines.append(
            f"| {dispatch['slots']:,} slots due at once, {beats['beats']} beat processes "
            f"(slot → last message in the broker) | {dispatch['slots']:,} | "
            f"{_ms(beats['seconds'])}; shares {beats['shares']} | - | - |"
        )
    for pickup in results.get("pickup", []):
        ours, stock = pickup["ours_all"], pickup["stock_all"]
        lines.append(
            f"| edit → pickup (add, pause, reschedule) | {pickup['jobs']:,} | "
            f"{_ms(ours['median'])} ({_ms(ours['p99'])}) | {_ms(stock['median'])} "
            f"({_ms(stock['p99'])}) | {_ratio(stock['median'], ours['median'])} |"
        )
    lag = results.get("lag")
    if lag:
        ours = lag["ours_lag"]
        lines.append(
            f"| slot → start lag, 50 runs/s, 3 beats + 2 workers | 50 | {_ms(ours['median'])} "
            f"({_ms(ours['p99'])}); {lag['ours_runs_per_expected']:.2f} runs per slot | "
            "no slots (intervals not anchored) | - |"
        )
        inserted = lag["ours_dispatch_lag"]
        lines.append(
            f"| slot → run inserted (the beat's part of the lag) | 50 | "
            f"{_ms(inserted['median'])} ({_ms(inserted['p99'])}) | - | - |"
        )
        ours_pe, stock_pe = lag["ours_period_error"], lag["stock1_period_error"]
        lines.append(
            f"| period error, 50 runs/s (ours 3 beats, stock 1 beat) | 50 | "
            f"{_ms(ours_pe['median'])} ({_ms(ours_pe['p99'])}) | {_ms(stock_pe['median'])} "
            f"({_ms(stock_pe['p99'])}); {lag['stock1_runs_per_expected']:.2f} runs per period | "
            f"{_ratio(stock_pe['median'], ours_pe['median'])} |"
        )
        lines.append(
            f"| runs per period with 3 beats | 50 | {lag['ours_runs_per_expected']:.2f} | "
            f"{lag['stock3_runs_per_expected']:.2f} | - |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.beat_bench")
    parser.add_argument("--sizes", default="1000,10000,100000", help="job counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="start-ups per size (ours)")
    parser.add_argument("--stock-rounds", type=int, default=3, help="start-ups per size (stock)")
    parser.add_argument("--pickup-sizes", default="10000,100000")
    parser.add_argument("--pickup-rounds", type=int, default=5, help="edits of each kind")
    parser.add_argument("--dispatch", type=int, default=10_000, help="simultaneous slots")
    parser.add_argument("--stock-cap", type=float, default=60.0, help="seconds stock may run")
    parser.add_argument("--skip-processes", action="store_true", help="no lag measurement")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    args = parser.parse_args(argv)

    sizes = [int(size) for size in args.sizes.split(",") if size]
    pickup_sizes = {int(size) for size in args.pickup_sizes.split(",") if size}
    results: dict[str, Any] = {"sizes": [], "pickup": []}
    with django_on_fresh_database("_beat_bench", None) as bench_url:
        with _quiet():
            for size in sizes:
                print(f"{size} jobs: start-up and idle tick", flush=True)
                stock_rounds = args.stock_rounds if size <= 10_000 else 1
                results["sizes"].append(measure_startup_and_idle(size, args.rounds, stock_rounds))
                if size in pickup_sizes:
                    print(f"{size} jobs: edit → pickup", flush=True)
                    stock_pickups = args.pickup_rounds if size <= 10_000 else 1
                    results["pickup"].append(
                        measure_pickup(size, args.pickup_rounds, stock_pickups)
                    )
            print(f"{args.dispatch} simultaneous slots", flush=True)
            results["dispatch"] = measure_dispatch(args.dispatch, args.stock_cap)
        if not args.skip_processes:
            with tempfile.TemporaryDirectory(prefix="beat-bench-") as tmp:
                print(f"{args.dispatch} simultaneous slots, 3 beat processes", flush=True)
                results["dispatch_beats"] = measure_dispatch_with_beats(
                    args.dispatch, 3, bench_url, Path(tmp)
                )
                print("lag at 50 runs/s with real processes", flush=True)
                results["lag"] = measure_lag(bench_url, Path(tmp))

    print()
    print(f"beat benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPU(s)")
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
