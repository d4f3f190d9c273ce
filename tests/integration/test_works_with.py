"""The tools a team runs around its workers, run for real against the cluster's beat and a real
Celery worker (embedded, on a thread of this process, on Redis): sentry-sdk with a capturing
transport, the OpenTelemetry SDK with an in-memory exporter, a Celery events receiver. Each sees
the runs as under stock beat (docs/works-with.md): per run, one ``task-sent`` event, one
publish span and one run span in a trace of its own, one Sentry transaction named after the job
that continues the trace the beat started; a failing job function's own exception once."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import celery.app.trace
import celery.worker.consumer.consumer
import pytest
import sentry_sdk
from celery.contrib.testing.worker import start_worker
from celery.signals import task_postrun
from django.db import connection, transaction
from django.test.utils import modify_settings
from django.utils import timezone
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask
from django_celery_beat.schedulers import DatabaseScheduler
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sentry_sdk.envelope import Envelope
from sentry_sdk.integrations.celery import CeleryIntegration
from sentry_sdk.transport import Transport

from jobs.audit import Actor
from jobs.beat.scheduler import ClusterScheduler
from jobs.broker import dispatch
from jobs.models import Job, JobRun, RunStatus
from jobs.registry import RUN_TASK
from jobs.schedule.kinds import At, Every
from jobs.services import JobDefinition, create_job
from project.celery import app
from tests.support import jobs_under_test, plain_tasks  # noqa: F401  (the tasks run here)
from tests.support.celery_events import events_heard
from tests.support.virtual_clock import VirtualClock

pytestmark = pytest.mark.django_db(transaction=True)

TESTS = Actor.code("tests")
BURST = dispatch.BURST_OVER + 50  # 150 runs due at once: the burst path


class CapturingTransport(Transport):
    """Sentry's transport, keeping each envelope instead of sending it."""

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.envelopes: list[Envelope] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        self.envelopes.append(envelope)


@dataclass
class Tools:
    sentry: CapturingTransport
    spans: InMemorySpanExporter
    queue: str = field(default_factory=lambda: f"works-with-{uuid.uuid4().hex[:8]}")

    def errors(self) -> list[Any]:
        return [e for env in self.sentry.envelopes if (e := env.get_event()) is not None]

    def transactions(self) -> list[Any]:
        found = [env.get_transaction_event() for env in self.sentry.envelopes]
        return [t for t in found if t is not None]

    def check_ins(self) -> list[dict[str, Any]]:
        return [
            item.payload.json
            for env in self.sentry.envelopes
            for item in env.items
            if item.type == "check_in" and item.payload.json is not None
        ]

    def finished_spans(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())


@pytest.fixture
def tools() -> Iterator[Tools]:
    transport = CapturingTransport()
    sentry_sdk.init(
        dsn="https://public@sentry.invalid/1",
        transport=transport,
        integrations=[CeleryIntegration(monitor_beat_tasks=True)],
        traces_sample_rate=1.0,
    )
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = CeleryInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield Tools(transport, exporter)
    finally:
        instrumentor.uninstrument()
        sentry_sdk.init(dsn=None)


@pytest.fixture
def worker(tools: Tools, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A real Celery worker on this process's threads, consuming the test's queue."""
    # A worker process sets Sentry up before it imports Celery's consumer, which then takes
    # Sentry's build_tracer; this process imported it before the test set Sentry up.
    monkeypatch.setattr(
        celery.worker.consumer.consumer, "build_tracer", celery.app.trace.build_tracer
    )
    # Its thread's database connection closed after each task, so the test database can go.
    task_postrun.connect(_close_connection)
    try:
        with start_worker(app, pool="solo", perform_ping_check=False, queues=[tools.queue]):
            yield
    finally:
        task_postrun.disconnect(_close_connection)


def _close_connection(**_: Any) -> None:
    connection.close()


def _jobs(
    count: int, task: str, queue: str, kwargs: dict[str, Any], prefix: str, hourly: bool = False
) -> list[Job]:
    """``count`` jobs due in a second: once, or ``hourly`` from then on."""
    slot = timezone.now().replace(microsecond=0) + timedelta(seconds=1)
    with transaction.atomic():
        jobs = [
            create_job(
                JobDefinition(
                    name=f"{prefix}-{n}",
                    task=task,
                    schedule=Every(3600, anchor=slot) if hourly else At(slot),
                    kwargs=kwargs,
                    policies={"queue": queue},
                ),
                actor=TESTS,
            )
            for n in range(count)
        ]
    # Edited well before the slot, however long making them took: the slot is their first.
    Job.objects.filter(pk__in=[job.pk for job in jobs]).update(updated_at=slot - timedelta(hours=1))
    return jobs


def _fire(jobs: list[Job]) -> None:
    """A cluster beat's tick at the jobs' slot."""
    slot = timezone.now() + timedelta(seconds=2)
    ClusterScheduler(app=app, clock=lambda: slot, maintain=False).tick_at(slot)


def _until_ended(jobs: list[Job], timeout: float = 300.0) -> list[JobRun]:
    deadline = time.monotonic() + timeout
    ended = (RunStatus.SUCCEEDED, RunStatus.FAILED)
    while True:
        runs = list(JobRun.objects.filter(job__in=jobs))
        if len(runs) == len(jobs) and all(run.status in ended for run in runs):
            return runs
        assert time.monotonic() < deadline, Counter(run.status for run in runs)
        time.sleep(0.1)


def _by_trace(spans: list[ReadableSpan]) -> dict[int, list[ReadableSpan]]:
    traces: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        assert span.context is not None
        traces.setdefault(span.context.trace_id, []).append(span)
    return traces


def test_a_burst_shows_each_run_as_stock_beat_does(
    tools: Tools, worker: None, tmp_path: Path
) -> None:
    """150 runs due at once (the burst path): as many task-sent events, OpenTelemetry traces
    (each one publish span and one run span named after the job, the run the publish's child)
    and Sentry transactions (each named after its job, in a trace of its own) as runs."""
    jobs = _jobs(BURST, "tests.record", tools.queue, {"log": str(tmp_path / "log")}, "works-burst")
    with events_heard(str(app.conf.broker_url)) as heard:
        _fire(jobs)
        runs = _until_ended(jobs)
        sent = heard.wait_for("task-sent", BURST, queue=tools.queue)
    assert {run.status for run in runs} == {RunStatus.SUCCEEDED}
    assert sorted(e["uuid"] for e in sent) == sorted(f"jobrun-{run.pk}" for run in runs)

    traces = _by_trace(tools.finished_spans())
    assert len(traces) == BURST
    names = {job.name for job in jobs}
    for spans in traces.values():
        publish = [s for s in spans if s.name == "apply_async/tests.record"]
        ran = [s for s in spans if s.name.startswith("run/")]
        assert len(publish) == len(ran) == 1, [s.name for s in spans]
        assert ran[0].parent is not None and ran[0].parent.span_id == publish[0].context.span_id
        names.discard(ran[0].name.removeprefix("run/"))
    assert names == set()  # each job's run span named after it

    transactions = [t for t in tools.transactions() if t.get("transaction") in
                    {job.name for job in jobs}]  # fmt: skip
    assert len(transactions) == BURST
    assert len({t["contexts"]["trace"]["trace_id"] for t in transactions}) == BURST


def test_a_failing_job_function_is_captured_once_with_its_own_exception(
    tools: Tools, worker: None
) -> None:
    """A ``@job`` function's exception reaches Sentry once, as itself (not ``RunFailed``),
    with its traceback, under a transaction named after the job."""
    jobs = _jobs(3, "tests.fail", tools.queue, {}, "works-fail")
    _fire(jobs)
    runs = _until_ended(jobs)
    assert {run.status for run in runs} == {RunStatus.FAILED}
    sentry_sdk.flush()
    errors = tools.errors()
    assert len(errors) == len(jobs)
    for error in errors:
        (exception,) = error["exception"]["values"]
        assert exception["type"] != "RunFailed"
        assert any(f["function"] == "fail" for f in exception["stacktrace"]["frames"])
    assert sorted(e["transaction"] for e in errors) == sorted(job.name for job in jobs)


def test_crons_check_in_every_run_in_a_burst_and_alone(
    tools: Tools, worker: None, tmp_path: Path
) -> None:
    """With ``monitor_beat_tasks``, each run of an hourly job sends its Crons check-ins: in
    progress from the beat, then ok or error from the worker, one check-in id, the monitor
    named after the job with its schedule as Sentry derives it: for 150 runs due at once (the
    burst path) and for failing jobs due beside them (another family: one by one)."""
    burst = _jobs(
        BURST, "tests.record", tools.queue, {"log": str(tmp_path / "log")}, "crons", hourly=True
    )
    failing = _jobs(2, "tests.fail", tools.queue, {}, "crons-fail", hourly=True)
    _fire([*burst, *failing])
    _until_ended([*burst, *failing])
    sentry_sdk.flush()
    by_job: dict[str, list[dict[str, Any]]] = {}
    for check_in in tools.check_ins():
        by_job.setdefault(check_in["monitor_slug"], []).append(check_in)
    assert set(by_job) == {job.name for job in [*burst, *failing]}
    expected = {job.name: "ok" for job in burst} | {job.name: "error" for job in failing}
    for name, check_ins in by_job.items():
        assert [c["status"] for c in check_ins] == ["in_progress", expected[name]], name
        assert len({c["check_in_id"] for c in check_ins}) == 1, name
        config = check_ins[0]["monitor_config"]
        assert config["schedule"] == {"type": "interval", "value": 1, "unit": "hour"}


# --- stock beat and the cluster on the same django-celery-beat rows ---------------------------

APPEND = "tests.support.plain_tasks.append"
BOOM = "tests.support.plain_tasks.boom"


@pytest.fixture
def results_kept(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """django-celery-results as its docs set it up (``django_celery_results`` installed, its
    database backend, extended results): the ``TaskResult`` model."""
    with modify_settings(INSTALLED_APPS={"append": "django_celery_results"}):
        from django_celery_results.models import TaskResult

        with connection.schema_editor() as editor:
            editor.create_model(TaskResult)
        monkeypatch.setitem(
            app.conf, "result_backend", "django_celery_results.backends:DatabaseBackend"
        )
        monkeypatch.setitem(app.conf, "result_extended", True)
        monkeypatch.setitem(app.conf, "result_expires", None)  # no backend_cleanup row
        # Results kept, as Celery's default is (the project's settings turn it off): each
        # task took the setting when it was made.
        monkeypatch.setitem(app.conf, "task_ignore_result", False)
        for name in (APPEND, BOOM, RUN_TASK):
            monkeypatch.setattr(app.tasks[name], "ignore_result", False)
        _forget_backend()
        try:
            yield TaskResult
        finally:
            _forget_backend()
            connection.close()
            with connection.schema_editor() as editor:
                editor.delete_model(TaskResult)


def _forget_backend() -> None:
    """Make the app build its result backend again from its settings, on its next use."""
    app._backend_cache = None  # type: ignore[attr-defined]  # Celery's, not in the stubs
    vars(app._local).pop("backend", None)  # type: ignore[attr-defined]


def _rows(queue: str, log: Path) -> list[PeriodicTask]:
    """Rows as a django-celery-beat project writes them: 150 every minute (a burst once they
    fall due together), one on a crontab, one whose task fails."""
    minute, _ = IntervalSchedule.objects.get_or_create(every=1, period=IntervalSchedule.MINUTES)
    every_minute, _ = CrontabSchedule.objects.get_or_create(
        minute="*", hour="*", day_of_week="*", day_of_month="*", month_of_year="*"
    )
    args = json.dumps([str(log)])
    rows = [
        PeriodicTask(name=f"side-{n}", task=APPEND, interval=minute, args=args, queue=queue)
        for n in range(BURST)
    ]
    rows.append(
        PeriodicTask(name="side-crontab", task=APPEND, crontab=every_minute, args=args, queue=queue)
    )
    rows.append(PeriodicTask(name="side-failing", task=BOOM, interval=minute, queue=queue))
    for row in rows:
        row.save()
    return rows


@dataclass
class Seen:
    """What the tools saw of one beat's runs of the rows, per row."""

    check_ins: dict[str, list[str]]  # the row's Crons check-in statuses, in order
    errors: Counter[str]  # Sentry error events, per exception type
    transactions: int
    traces: int  # OpenTelemetry traces with one publish span and one run span
    sent: int  # task-sent events
    results: dict[str, tuple[str, str]]  # row: (TaskResult status, task_name)


def _seen(tools: Tools, sent: list[Any], task_result: Any, task_ids: set[str]) -> Seen:
    sentry_sdk.flush()
    check_ins: dict[str, list[str]] = {}
    for check_in in tools.check_ins():
        check_ins.setdefault(check_in["monitor_slug"], []).append(check_in["status"])
    errors = Counter(e["exception"]["values"][-1]["type"] for e in tools.errors())
    traces = [
        spans for spans in _by_trace(tools.finished_spans()).values()
        if sorted(s.name.split("/")[0] for s in spans) == ["apply_async", "run"]
    ]  # fmt: skip
    found = task_result.objects.filter(task_id__in=task_ids)
    return Seen(
        check_ins=check_ins,
        errors=errors,
        transactions=len(tools.transactions()),
        traces=len(traces),
        sent=len([e for e in sent if e["uuid"] in task_ids]),
        results={r.periodic_task_name: (r.status, r.task_name) for r in found},
    )


def _results_stored(task_result: Any, count: int, timeout: float = 120.0) -> set[str]:
    deadline = time.monotonic() + timeout
    while (stored := task_result.objects.filter(status__in=["SUCCESS", "FAILURE"])).count() < count:
        assert time.monotonic() < deadline, f"{stored.count()} of {count} results stored"
        time.sleep(0.1)
    return set(stored.values_list("task_id", flat=True))


def test_stock_beat_and_the_cluster_on_the_same_rows_show_each_tool_the_same_runs(
    tools: Tools, results_kept: Any, worker: None, tmp_path: Path
) -> None:
    """The same django-celery-beat rows (150 every minute, one crontab, one failing), sent once
    by stock beat (``DatabaseScheduler.apply_entry``, as its tick applies each due entry,
    Sentry's hook included) and once by the cluster's beat (adopted, all due in one tick: the
    burst path and the one-by-one path). Each tool sees the same of both, per row: Crons
    check-ins, Sentry errors (the task's own exception), transactions, OpenTelemetry traces,
    ``task-sent`` events and a django-celery-results row with the task's name and the row's."""
    task_result = results_kept
    rows = _rows(tools.queue, tmp_path / "log")
    names = {row.name for row in rows}
    expected_results = {row.name: ("SUCCESS", APPEND) for row in rows[:-1]} | {
        "side-failing": ("FAILURE", BOOM)
    }

    stock = DatabaseScheduler(app=app)
    with events_heard(str(app.conf.broker_url)) as heard:
        with app.producer_or_acquire() as producer:
            for entry in stock.schedule.values():
                if entry.name in names:
                    stock.apply_entry(entry, producer=producer)
        task_ids = _results_stored(task_result, len(rows))
        sent = heard.wait_for("task-sent", len(rows), queue=tools.queue)
        under_stock = _seen(tools, sent, task_result, task_ids)
    assert under_stock.results == expected_results

    tools.sentry.envelopes.clear()
    tools.spans.clear()
    task_result.objects.all().delete()
    # The cluster's beat adopts the rows at a minute's start, then fires their next slot.
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=1)
    clock = VirtualClock(start)
    beat = ClusterScheduler(app=app, clock=clock, maintain=False)
    beat.tick_at(start + timedelta(milliseconds=5))
    clock.now = start + timedelta(minutes=1, milliseconds=5)
    with events_heard(str(app.conf.broker_url)) as heard:
        beat.tick_at(clock.now)
        jobs = list(Job.objects.filter(name__in=names))
        assert len(jobs) == len(rows) and all(job.adopted for job in jobs)
        _until_ended(jobs)
        task_ids = _results_stored(task_result, len(rows))
        sent = heard.wait_for("task-sent", len(rows), queue=tools.queue)
        under_cluster = _seen(tools, sent, task_result, task_ids)

    assert under_cluster == under_stock
    assert under_stock.check_ins == {
        row.name: ["in_progress", "error" if row.task == BOOM else "ok"] for row in rows
    }
    assert under_stock.errors == Counter({"RuntimeError": 1})
    assert under_stock.transactions == under_stock.traces == under_stock.sent == len(rows)
