"""Ad-hoc calls of guarded tasks (``base=GuardedTask``, ``jobs.calls``): ``.delay()`` records a
run of the task's job (trigger ``call``, with the call's arguments), the worker takes the same
lease per lock key and follows the job's overlap policy; ``raise_on_duplicate`` refuses the call
itself. Plain tasks without the base are untouched. Real PostgreSQL; the worker is
``execute_run`` on threads, as in test_plain_tasks.py."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import Task
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from jobs import calls, registry
from jobs.exceptions import DuplicateCall, NoJobForCall, RunFailed
from jobs.guard.runner import execute_run
from jobs.models import Job, JobRun, Lease, RunStatus, Trigger
from tests.integration.conftest import Published
from tests.support import jobs_under_test, plain_tasks
from tests.support.plain_tasks import guarded_boom, guarded_city, guarded_once, guarded_span
from tests.support.worker_threads import on_a_worker_thread, worker_holding_its_lease

pytestmark = pytest.mark.django_db(transaction=True)

SPAN = "tests.support.plain_tasks.guarded_span"
CITY = "tests.support.plain_tasks.guarded_city"
ONCE = "tests.support.plain_tasks.guarded_once"
BOOM = "tests.support.plain_tasks.guarded_boom"
MakeJob = Callable[..., Job]


def _spans(log: Path) -> list[tuple[str, float, float]]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [(note, float(start), float(end)) for note, start, end, _ in map(str.split, lines)]


def _scheduled_run(job: Job) -> JobRun:
    return JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.SCHEDULED)


def _run_id(result: Any) -> int:
    return int(result.id.removeprefix("jobrun-"))


def test_a_call_is_a_run_of_the_job_under_its_lease(
    make_job: MakeJob, published: Published, tmp_path: Path
) -> None:
    log = tmp_path / "spans.log"
    job = make_job("sync", task=SPAN, kwargs={"log": str(tmp_path)})
    result = guarded_span.delay(str(log), note="called")
    run = JobRun.objects.get(pk=_run_id(result))
    assert (run.job_id, run.trigger, run.status) == (job.pk, Trigger.CALL, RunStatus.SCHEDULED)
    assert (run.args, run.kwargs) == ([str(log)], {"note": "called"})
    assert published == [(run.pk, None)], "published once the run was committed"

    execute_run(run.pk, task_id=result.id, node="n")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert run.lease_key == "job:sync" and run.fencing_token is not None
    assert run.result == "called"
    assert [note for note, _, _ in _spans(log)] == ["called"]


def test_a_call_goes_to_the_runner_under_the_jobs_name(
    make_job: MakeJob, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    make_job("sync", task=SPAN, kwargs={"log": str(tmp_path)})
    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(
        guarded_span.app, "send_task", lambda name, **options: sent.append((name, options))
    )
    result = guarded_span.delay(str(tmp_path / "spans.log"))
    [(name, options)] = sent
    assert name == registry.RUN_TASK and options["shadow"] == "sync"
    assert options["task_id"] == result.id and options["kwargs"]["run_id"] == _run_id(result)


def _call_while_a_scheduled_run_holds_the_lease(job: Job, log: Path) -> tuple[JobRun, JobRun]:
    """A scheduled run of ``job`` on a worker thread; once it holds the lease, a call executed
    here; both ended. The scheduled run and the call (read again)."""
    scheduled = _scheduled_run(job)
    worker = worker_holding_its_lease(scheduled.pk)

    call = JobRun.objects.get(pk=_run_id(guarded_span.delay(str(log), note="call")))
    execute_run(call.pk, task_id="c", node="n")
    worker.join()
    call.refresh_from_db()
    return scheduled, call


def test_a_call_while_a_scheduled_run_holds_the_lease_is_skipped_naming_it(
    make_job: MakeJob, published: Published, tmp_path: Path
) -> None:
    log = tmp_path / "spans.log"
    job = make_job("sync", task=SPAN, kwargs={"log": str(log), "note": "slot", "seconds": 2})
    scheduled, call = _call_while_a_scheduled_run_holds_the_lease(job, log)
    assert call.status == RunStatus.SKIPPED and call.trigger == Trigger.CALL
    assert "lease job:sync held by n:" in call.error and f"run-{scheduled.pk}" in call.error
    assert [note for note, _, _ in _spans(log)] == ["slot"]


def test_a_call_under_overlap_wait_runs_after_the_scheduled_run(
    make_job: MakeJob, published: Published, tmp_path: Path
) -> None:
    log = tmp_path / "spans.log"
    kwargs = {"log": str(log), "note": "slot", "seconds": 1.5}
    job = make_job("sync", task=SPAN, kwargs=kwargs, overlap="wait")
    scheduled, call = _call_while_a_scheduled_run_holds_the_lease(job, log)
    scheduled.refresh_from_db()
    assert (scheduled.status, call.status) == (RunStatus.SUCCEEDED, RunStatus.SUCCEEDED)
    assert call.fencing_token == scheduled.fencing_token + 1  # type: ignore[operator]
    [(first, _, slot_end), (second, call_start, _)] = _spans(log)
    assert (first, second) == ("slot", "call") and call_start >= slot_end


def test_two_concurrent_calls_run_one_at_a_time(
    make_job: MakeJob, published: Published, tmp_path: Path
) -> None:
    log = tmp_path / "spans.log"
    make_job("sync", task=SPAN, kwargs={"log": str(tmp_path)}, overlap="wait")
    calls = [_run_id(guarded_span.delay(str(log), note=f"c{n}", seconds=0.5)) for n in range(2)]
    workers = [on_a_worker_thread(run_id) for run_id in calls]
    for worker in workers:
        worker.join()
    runs = JobRun.objects.filter(pk__in=calls)
    assert {run.status for run in runs} == {RunStatus.SUCCEEDED}
    assert len({run.fencing_token for run in runs}) == 2
    (_, _, first_end), (_, second_start, _) = sorted(_spans(log), key=lambda span: span[1])
    assert second_start >= first_end, "the two calls overlapped"


def test_a_lock_key_from_the_arguments_separates_calls_by_city(
    make_job: MakeJob, published: Published, tmp_path: Path
) -> None:
    log = tmp_path / "spans.log"
    make_job("cities", task=CITY, kwargs={"log": str(log), "city": "Oslo"})
    paris = _run_id(guarded_city.delay(str(log), "Paris", seconds=1.5))
    worker = worker_holding_its_lease(paris)
    # Another city runs at once; the same city, by position or by name, finds its lease held.
    lyon = _run_id(guarded_city.delay(str(log), city="Lyon"))
    paris_again = _run_id(guarded_city.delay(log=str(log), city="Paris"))
    execute_run(lyon, task_id="l", node="n")
    execute_run(paris_again, task_id="p", node="n")
    worker.join()
    runs = {run.pk: run for run in JobRun.objects.filter(trigger=Trigger.CALL)}
    assert runs[paris].status == RunStatus.SUCCEEDED and runs[paris].lease_key == "city:Paris"
    assert runs[lyon].status == RunStatus.SUCCEEDED and runs[lyon].lease_key == "city:Lyon"
    assert runs[paris_again].status == RunStatus.SKIPPED
    assert "lease city:Paris held by" in runs[paris_again].error


def test_the_jobs_scheduled_runs_derive_the_same_key(
    make_job: MakeJob, published: Published, tmp_path: Path
) -> None:
    job = make_job("cities", task=CITY, kwargs={"log": str(tmp_path / "l"), "city": "Oslo"})
    assert CITY in registry.keyed_names()
    run = _scheduled_run(job)
    execute_run(run.pk, task_id="s", node="n")
    run.refresh_from_db()
    assert (run.status, run.lease_key) == (RunStatus.SUCCEEDED, "city:Oslo")


def test_raise_on_duplicate_refuses_a_call_while_the_lease_is_held_or_a_call_waits(
    make_job: MakeJob, published: Published, tmp_path: Path
) -> None:
    log = tmp_path / "spans.log"
    make_job("once", task=ONCE, kwargs={"log": str(tmp_path)})
    first = _run_id(guarded_once.delay(str(log), note="first", seconds=1.5))
    with pytest.raises(DuplicateCall, match=f"run {first} of lock key job:once waits"):
        guarded_once.delay(str(log), note="queued twice")
    worker = worker_holding_its_lease(first)
    with pytest.raises(DuplicateCall, match="lease job:once is held by n:"):
        guarded_once.delay(str(log), note="while running")
    worker.join()
    again = _run_id(guarded_once.delay(str(log), note="after"))
    execute_run(again, task_id="a", node="n")
    assert [note for note, _, _ in _spans(log)] == ["first", "after"]
    assert JobRun.objects.filter(trigger=Trigger.CALL).count() == 2, "refused calls record nothing"


def test_a_failed_calls_retry_keeps_the_calls_arguments(
    make_job: MakeJob, published: Published, tmp_path: Path
) -> None:
    log = tmp_path / "boom.log"
    make_job("boom", task=BOOM, kwargs={"log": str(log), "note": "job's"}, max_retries=1)
    call = _run_id(guarded_boom.delay(str(log), note="call's"))
    execute_run(call, task_id="c", node="n")
    retry = JobRun.objects.get(retry_of_id=call)
    assert (retry.trigger, retry.args, retry.kwargs) == ("retry", [str(log)], {"note": "call's"})
    execute_run(retry.pk, task_id="r", node="n")
    assert log.read_text().split() == ["call's", "call's"]


def test_a_countdown_starts_the_call_later(
    make_job: MakeJob, published: Published, tmp_path: Path
) -> None:
    make_job("sync", task=SPAN, kwargs={"log": str(tmp_path)})
    before = timezone.now()
    run = JobRun.objects.get(pk=_run_id(guarded_span.apply_async([str(tmp_path)], countdown=60)))
    assert run.scheduled_for >= before + timedelta(seconds=60)
    at = timezone.now() + timedelta(minutes=5)
    later = JobRun.objects.get(pk=_run_id(guarded_span.apply_async([str(tmp_path)], eta=at)))
    assert later.scheduled_for == at
    assert published == [(run.pk, run.scheduled_for), (later.pk, at)]


def test_calling_the_task_directly_runs_it_inline_unguarded(
    make_job: MakeJob, tmp_path: Path
) -> None:
    log = tmp_path / "spans.log"
    make_job("sync", task=SPAN, kwargs={"log": str(tmp_path)})
    assert guarded_span(str(log), note="inline") == "inline"
    assert [note for note, _, _ in _spans(log)] == ["inline"]
    assert not JobRun.objects.exists()


def test_calls_that_cannot_be_guarded_are_refused_naming_why(
    make_job: MakeJob, published: Published, tmp_path: Path
) -> None:
    with pytest.raises(NoJobForCall, match="no job runs this task"):
        guarded_span.delay(str(tmp_path))
    make_job("a", task=SPAN, kwargs={"log": str(tmp_path)})
    with pytest.raises(TypeError, match="guarded_span: missing a required argument: 'log'"):
        guarded_span.delay()
    with pytest.raises(TypeError, match="guarded_span: kwargs cannot be stored as JSON"):
        guarded_span.delay(str(tmp_path), note=object())
    with pytest.raises(TypeError, match="a guarded call takes no link, queue"):
        guarded_span.apply_async([str(tmp_path)], link=guarded_span.s(), queue="other")
    make_job("b", task=SPAN, kwargs={"log": str(tmp_path)})
    with pytest.raises(NoJobForCall, match=r"several jobs run this task \(a, b\)"):
        guarded_span.delay(str(tmp_path))
    assert not JobRun.objects.exists()


def test_a_call_is_recorded_in_one_statement_as_the_row_it_made(
    make_job: MakeJob, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The floor of a durable call: its job read and its run inserted in one statement (one
    round trip outside a transaction), and the run it publishes is the row the database holds."""
    job = make_job("sync", task=SPAN, kwargs={"log": str(tmp_path)}, queue="reports")
    handed: list[tuple[Job, JobRun]] = []
    monkeypatch.setattr(calls, "publish_call", lambda job, run: handed.append((job, run)))
    with CaptureQueriesContext(connection) as queries:
        result = guarded_span.delay(str(tmp_path), note="once")
    assert len(queries) == 1, [q["sql"] for q in queries]
    [(published_job, published_run)] = handed
    stored = JobRun.objects.get(pk=_run_id(result))
    fields = [f.attname for f in JobRun._meta.concrete_fields]
    assert [getattr(published_run, f) for f in fields] == [getattr(stored, f) for f in fields]
    assert (published_job.pk, published_job.queue) == (job.pk, "reports")


def test_a_task_may_name_its_job(
    make_job: MakeJob, published: Published, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(guarded_span, "job", "nightly")
    with pytest.raises(NoJobForCall, match="its calls share the job 'nightly', which does not"):
        guarded_span.delay(str(tmp_path))
    make_job("other", task=SPAN, kwargs={"log": str(tmp_path)})
    nightly = make_job("nightly", task=SPAN, kwargs={"log": str(tmp_path)})
    run = JobRun.objects.get(pk=_run_id(guarded_span.delay(str(tmp_path))))
    assert run.job_id == nightly.pk
    make_job("elsewhere", task=ONCE, kwargs={"log": str(tmp_path)})
    monkeypatch.setattr(guarded_span, "job", "elsewhere")
    with pytest.raises(NoJobForCall, match=f"the job 'elsewhere' runs {ONCE!r}, not this task"):
        guarded_span.delay(str(tmp_path))


def test_calls_of_an_unguarded_task_are_celerys_own(
    django_assert_num_queries: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = plain_tasks.append._get_current_object()  # type: ignore[attr-defined]
    assert type(task).apply_async is Task.apply_async
    sent: list[str] = []
    monkeypatch.setattr(task.app, "send_task", lambda name, *_, **options: sent.append(name))
    with django_assert_num_queries(0):
        plain_tasks.append.delay("/dev/null")
    assert sent == ["tests.support.plain_tasks.append"]
    assert not JobRun.objects.exists()


def test_a_call_holds_the_lease_for_the_jobs_ttl(
    make_job: MakeJob, published: Published, tmp_path: Path
) -> None:
    make_job("sync", task=SPAN, kwargs={"log": str(tmp_path)}, lease_ttl=7)
    call = _run_id(guarded_span.delay(str(tmp_path / "spans.log"), seconds=1))
    worker = worker_holding_its_lease(call)
    held = Lease.objects.get(key="job:sync")
    worker.join()
    assert held.expires_at - held.acquired_at == timedelta(seconds=7)
    assert held.token == JobRun.objects.get(pk=call).fencing_token


def test_calls_show_in_the_api_and_the_cli_as_trigger_call(
    make_job: MakeJob, published: Published, insider: Client, tmp_path: Path
) -> None:
    make_job("sync", task=SPAN, kwargs={"log": str(tmp_path)})
    call = _run_id(guarded_span.delay(str(tmp_path / "spans.log")))
    _scheduled_run(make_job("other", task=SPAN, kwargs={"log": str(tmp_path)}))
    api = insider.get("/api/runs", {"trigger": "call"}).json()["results"]
    assert [(run["id"], run["job"], run["trigger"]) for run in api] == [(call, "sync", "call")]
    out = io.StringIO()
    call_command("jobs", "runs", "sync", "--json", stdout=out)
    assert [(run["id"], run["trigger"]) for run in json.loads(out.getvalue())] == [(call, "call")]


def test_the_admin_shows_a_calls_trigger_and_arguments(
    make_job: MakeJob, published: Published, admin_client: Client, tmp_path: Path
) -> None:
    make_job("sync", task=SPAN, kwargs={"log": str(tmp_path)})
    call = _run_id(guarded_span.delay("/tmp/call-log", note="from-a-call"))
    listed = admin_client.get(reverse("admin:jobs_jobrun_changelist"), {"trigger__exact": "call"})
    assert listed.status_code == 200 and f'href="/admin/jobs/jobrun/{call}/change/' in (
        listed.content.decode()
    )
    page = admin_client.get(reverse("admin:jobs_jobrun_change", args=[call])).content.decode()
    assert "Arguments of the call" in page and "from-a-call" in page and "/tmp/call-log" in page


def test_under_task_always_eager_a_call_runs_here_under_its_lease(
    make_job: MakeJob, published: Published, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    log = tmp_path / "spans.log"
    conf = guarded_span.app.conf
    assert not conf.task_always_eager and not conf.task_eager_propagates
    conf.update(task_always_eager=True)
    request.addfinalizer(lambda: conf.update(task_always_eager=False))
    make_job("sync", task=SPAN, kwargs={"log": str(log), "note": "slot", "seconds": 1.5})
    make_job("boom", task=BOOM, kwargs={"log": str(tmp_path / "boom.log")})

    result = guarded_span.delay(str(log), note="eager")
    assert (result.state, result.result) == ("SUCCESS", {"status": "succeeded", "result": "eager"})
    run = JobRun.objects.get(pk=_run_id(result))
    assert (run.status, run.lease_key) == (RunStatus.SUCCEEDED, "job:sync")

    scheduled = _scheduled_run(Job.objects.get(name="sync"))
    worker = worker_holding_its_lease(scheduled.pk)
    skipped: Any = guarded_span.delay(str(log), note="while held").result
    worker.join()
    assert skipped["status"] == "skipped" and "lease job:sync held by" in skipped["reason"]
    failed = guarded_boom.delay(str(tmp_path / "boom.log"), note="eager")
    assert failed.state == "FAILURE" and "boom eager" in str(failed.result)
    conf.update(task_eager_propagates=True)
    request.addfinalizer(lambda: conf.update(task_eager_propagates=False))
    with pytest.raises(RunFailed, match="boom propagated"):
        guarded_boom.delay(str(tmp_path / "boom.log"), note="propagated")
    assert published == [], "an eager call sends no message"
    assert [note for note, _, _ in _spans(log)] == ["eager", "slot"]


def test_a_job_functions_delay_is_a_call_of_its_job(
    make_job: MakeJob, published: Published, tmp_path: Path
) -> None:
    log = tmp_path / "record.log"
    make_job("rec", task="tests.record", kwargs={"log": str(tmp_path / "job.log")})
    make_job("cities", task="tests.by_city", kwargs={"log": str(log), "city": "Oslo"})
    run = JobRun.objects.get(pk=_run_id(jobs_under_test.record.delay(str(log))))  # type: ignore[attr-defined]
    assert (run.trigger, run.args, run.kwargs) == (Trigger.CALL, [str(log)], {})
    execute_run(run.pk, task_id="r", node="n")
    run.refresh_from_db()
    assert (run.status, run.lease_key) == (RunStatus.SUCCEEDED, "job:rec")
    assert log.read_text().split()[0] == str(run.pk), "the function ran with the call's log"

    paris = jobs_under_test.by_city.apply_async([str(log), "Paris"])  # type: ignore[attr-defined]
    execute_run(_run_id(paris), task_id="p", node="n")
    assert JobRun.objects.get(pk=_run_id(paris)).lease_key == "city:Paris"
    with pytest.raises(TypeError, match=r"tests\.record: too many positional arguments"):
        jobs_under_test.record.delay(str(log), 1, 2)  # type: ignore[attr-defined]
