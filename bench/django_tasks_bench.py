"""What a Django task costs on the cluster (``jobs.django_tasks``), against a guarded Celery
task's call, in one process (Django 6: run it with ``.venv-django6``):

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/jobs \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/4 \\
        .venv-django6/bin/python -m bench.django_tasks_bench [--calls 1000] [--rounds 5]

Alternating by round, ``--calls`` times each:

- **enqueue**: ``noop.enqueue(i)`` of a Django ``@task`` (``bench.django_tasks_jobs``): the run
  recorded, published to Redis after commit, its ``TaskResult`` made;
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

Per call, the median and p99 wall time of the rounds' medians and p99s. The messages go to a
queue of the benchmark's own, purged at the end; it works in its own database
(``<DATABASE_URL's name>_django_tasks``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.databases import django_on_fresh_database
from bench.guard_cost import _log_to_nowhere
from bench.measure import percentile

QUEUE = "bench-django-tasks"
KINDS = ("enqueue", "delay", "floor", "celery delay", "run enqueued", "run delayed")


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
    return results


def table(results: dict[str, list[tuple[float, float]]], calls: int) -> str:
    lines = [
        f"| per call, {calls} calls x {len(results['enqueue'])} rounds, one process "
        "| median ms | p99 ms |",
        "| --- | --- | --- |",
    ]
    for kind in KINDS:
        median = statistics.median(r[0] for r in results[kind])
        p99 = statistics.median(r[1] for r in results[kind])
        lines.append(f"| {kind} | {median:.3f} | {p99:.3f} |")
    floor = statistics.median(r[0] for r in results["floor"])
    ratios = ", ".join(
        f"{kind} {statistics.median(r[0] for r in results[kind]) / floor:.2f}x"
        for kind in ("enqueue", "delay", "celery delay")
    )
    lines += ["", f"Median per call against the floor (one INSERT + one publish): {ratios}."]
    return "\n".join(lines)


def _purge() -> None:
    from celery import current_app

    with current_app.connection_for_write() as connection:
        channel: Any = connection.default_channel
        channel.queue_purge(QUEUE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.django_tasks_bench")
    parser.add_argument("--calls", type=int, default=1000, help="calls per kind and round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    with django_on_fresh_database("_django_tasks", "bench.django_tasks_jobs"):
        _log_to_nowhere()
        try:
            results = measure(args.calls, args.rounds)
        finally:
            _purge()
    print()
    print(table(results, args.calls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
