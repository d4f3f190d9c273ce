"""Django 6's Tasks framework on the cluster (``jobs.django_tasks``): ``enqueue()`` records a
guarded run of the task's own job and publishes it through Celery; ``get_result()`` answers
from the run's record; a ``@task`` is a job's task like any registered one. Real PostgreSQL; the
worker is ``execute_run`` (on threads where two runs overlap), as in test_calls.py.

Django 5.2 has no ``django.tasks``: skipped there (CI runs this module on Django 6 too)."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("django.tasks")

from celery import current_app
from django.core.management import call_command
from django.tasks import TaskResultStatus, task_backends
from django.tasks.exceptions import TaskResultDoesNotExist
from django.test import Client, override_settings
from django.utils import timezone

from jobs import registry
from jobs.django_tasks.backend import ClusterTaskBackend
from jobs.guard import lease as lease_module
from jobs.guard.runner import execute_run
from jobs.models import Job, JobKind, JobRun, Lease, RunStatus, Trigger
from jobs.upkeep.recovery import recover_lost_runs
from tests.support import django_tasks
from tests.support.fuzzing import any_text, fuzz_settings
from tests.support.hostile_values import UNENCODABLE
from tests.support.worker_threads import worker_holding_its_lease

pytestmark = pytest.mark.django_db(transaction=True)


def _backend() -> Any:
    return task_backends["default"]


ADD = "tests.support.django_tasks.add"
SPAN = "tests.support.django_tasks.span"


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """The messages published to the broker (task name, options), captured instead of sent."""
    messages: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(
        current_app, "send_task", lambda name, **options: messages.append((name, options))
    )
    return messages


def _run(result: Any) -> JobRun:
    return JobRun.objects.get(pk=int(result.id.removeprefix("jobrun-")))


def _work(result: Any) -> Any:
    """The worker runs the result's newest attempt; the result read back."""
    run = _run(result)
    while (retry := JobRun.objects.filter(retry_of=run).first()) is not None:
        run = retry
    execute_run(run.pk, task_id=f"jobrun-{run.pk}", node="worker-1")
    return _backend().get_result(result.id)


def test_the_backend_says_what_it_supports() -> None:
    assert isinstance(_backend(), ClusterTaskBackend)
    backend = type(_backend())
    assert (backend.supports_defer, backend.supports_async_task) == (True, True)
    assert (backend.supports_get_result, backend.supports_priority) == (True, True)


def test_enqueue_records_a_call_run_of_the_tasks_own_job_and_publishes_it(
    sent: list[tuple[str, dict[str, Any]]],
) -> None:
    result = django_tasks.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    run = _run(result)
    job = Job.objects.get(name=ADD)
    assert (job.task, job.kind, job.queue) == (ADD, JobKind.TRIGGERED, "default")
    assert (run.job_id, run.trigger, run.status) == (job.pk, Trigger.CALL, RunStatus.SCHEDULED)
    assert (run.args, run.kwargs) == ([2, 3], {})
    assert (result.args, result.kwargs, result.enqueued_at) == ([2, 3], {}, run.created_at)
    assert result.task is django_tasks.add and result.errors == result.worker_ids == []
    assert [(name, options["task_id"], options["shadow"]) for name, options in sent] == [
        (registry.RUN_TASK, result.id, ADD)
    ], "one message, to the runner under the task's name, with the run's task id"
    assert sent[0][1]["queue"] == "default" and "eta" not in sent[0][1]
    # A second enqueue is a second run of the same job.
    assert _run(django_tasks.add.enqueue(1, 1)).job_id == job.pk
    assert Job.objects.filter(task=ADD).count() == 1


def test_a_run_that_succeeds_is_successful_with_its_return_value(
    sent: list[tuple[str, dict[str, Any]]],
) -> None:
    result = django_tasks.add.enqueue(2, b=3)
    done = _work(result)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 5
    assert (done.args, done.kwargs, done.worker_ids, done.errors) == (
        [2],
        {"b": 3},
        ["worker-1"],
        [],
    )
    assert done.started_at is not None and done.finished_at >= done.started_at
    # Through the task, and by refreshing the handle enqueue returned.
    assert django_tasks.add.get_result(result.id).return_value == 5
    result.refresh()
    assert (result.status, result.return_value, result.attempts) == ("SUCCESSFUL", 5, 1)
    run = _run(result)
    assert run.fencing_token is not None and run.lease_key == f"job:{ADD}:run-{run.pk}"


def test_a_run_that_raises_is_failed_with_the_exception_and_its_traceback(
    sent: list[tuple[str, dict[str, Any]]],
) -> None:
    done = _work(django_tasks.boom.enqueue("no such city"))
    assert done.status == TaskResultStatus.FAILED
    [error] = done.errors
    assert error.exception_class is ValueError
    assert "ValueError: no such city" in error.traceback
    with pytest.raises(ValueError, match="failed"):
        done.return_value  # noqa: B018  (Django's property raises for a failed task)


def test_a_coroutine_task_runs_to_its_end() -> None:
    assert _work(django_tasks.double.enqueue(21)).return_value == 42


def test_a_task_that_takes_context_gets_its_running_result(
    sent: list[tuple[str, dict[str, Any]]],
) -> None:
    result = django_tasks.introspect.enqueue(note="hi")
    seen = _work(result).return_value
    assert seen == {"attempt": 1, "id": result.id, "status": "RUNNING", "note": "hi"}


def test_a_retry_makes_the_result_ready_again_then_successful(
    sent: list[tuple[str, dict[str, Any]]], tmp_path: Path
) -> None:
    result = django_tasks.flaky.enqueue(str(tmp_path / "flaky.log"))
    first = _work(result)
    assert first.status == TaskResultStatus.READY, "a retry is due: ready to run again"
    assert [error.exception_class for error in first.errors] == [RuntimeError]
    done = _work(result)
    assert (done.status, done.return_value, done.attempts) == ("SUCCESSFUL", 2, 2)
    assert len(done.errors) == 1, "the first attempt's error is kept"
    assert JobRun.objects.filter(job__name=django_tasks.flaky.module_path).count() == 2


def test_run_after_holds_the_run_until_then(sent: list[tuple[str, dict[str, Any]]]) -> None:
    later = timezone.now() + timedelta(minutes=5)
    result = django_tasks.add.using(run_after=later).enqueue(1, 2)
    assert _run(result).scheduled_for == later
    assert sent[0][1]["eta"] == later
    assert _backend().get_result(result.id).status == TaskResultStatus.READY


def test_priority_and_queue_name_route_the_message(
    sent: list[tuple[str, dict[str, Any]]],
) -> None:
    django_tasks.urgent.enqueue()
    assert Job.objects.get(name=django_tasks.urgent.module_path).priority == 9
    tasks = {"default": {"BACKEND": "jobs.django_tasks.backend.ClusterTaskBackend",
                         "QUEUES": ["default", "reports"]}}  # fmt: skip
    with override_settings(TASKS=tasks):
        django_tasks.add.using(queue_name="reports", priority=-100).enqueue(1, 2)
    routed = sent[-1][1]
    assert routed["queue"] == "reports"
    assert routed["priority"] == _wire(0)
    assert Job.objects.get(name=ADD).queue == "default", "the job keeps its own routing"
    # An operator moved the task's own job: the declared task's runs follow it.
    Job.objects.filter(name=ADD).update(queue="ops", priority=2)
    django_tasks.add.enqueue(1, 2)
    assert (sent[-1][1]["queue"], sent[-1][1]["priority"]) == ("ops", _wire(2))


def _wire(priority: int) -> int:
    from jobs.broker.messages import wire_priority

    return wire_priority(priority)


def test_runs_without_a_lock_key_run_side_by_side_each_under_its_own_lease(
    sent: list[tuple[str, dict[str, Any]]], tmp_path: Path
) -> None:
    log, release = tmp_path / "spans.log", tmp_path / "release"
    slow = django_tasks.span.enqueue(str(log), "slow", release=str(release))
    worker = worker_holding_its_lease(_run(slow).pk)
    quick = _work(django_tasks.span.enqueue(str(log), "quick"))
    assert quick.status == TaskResultStatus.SUCCESSFUL, "not held back by the running one"
    assert _backend().get_result(slow.id).status == TaskResultStatus.RUNNING
    release.touch()
    worker.join()
    assert _backend().get_result(slow.id).status == TaskResultStatus.SUCCESSFUL
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["quick", "slow"]
    keys = set(JobRun.objects.filter(job__name=SPAN).values_list("lease_key", flat=True))
    assert len(keys) == 2


def test_a_lock_key_keeps_one_run_per_key_and_the_others_fail_as_skipped(
    sent: list[tuple[str, dict[str, Any]]], tmp_path: Path
) -> None:
    log, release = tmp_path / "cities.log", tmp_path / "release"
    paris = django_tasks.sync_city.enqueue(str(log), "Paris", release=str(release))
    worker = worker_holding_its_lease(_run(paris).pk)
    lyon = _work(django_tasks.sync_city.enqueue(str(log), city="Lyon"))
    paris_again = _work(django_tasks.sync_city.enqueue(log=str(log), city="Paris"))
    release.touch()
    worker.join()
    assert lyon.status == TaskResultStatus.SUCCESSFUL
    assert paris_again.status == TaskResultStatus.FAILED
    assert "lease city:Paris held by" in paris_again.errors[0].traceback
    assert _backend().get_result(paris.id).return_value == "Paris"
    assert _run(paris).lease_key == "city:Paris"


def test_a_run_whose_lease_lapsed_is_lost_and_failed(
    sent: list[tuple[str, dict[str, Any]]], tmp_path: Path
) -> None:
    log, release = tmp_path / "spans.log", tmp_path / "release"
    result = django_tasks.span.enqueue(str(log), "stalled", release=str(release))
    run_id = _run(result).pk
    worker = worker_holding_its_lease(run_id)
    # Maintenance, as if the lease's ttl had passed without a renewal (a dead worker).
    assert recover_lost_runs(now=timezone.now() + timedelta(hours=1)) == [run_id]
    release.touch()
    worker.join()
    lost = _backend().get_result(result.id)
    assert lost.status == TaskResultStatus.FAILED
    [error] = lost.errors
    assert error.exception_class_path == "jobs.exceptions.RunLost"
    assert "lapsed" in error.traceback
    assert JobRun.objects.get(pk=run_id).status == RunStatus.LOST, "its late finish was fenced"


def test_an_unknown_result_id_does_not_exist(sent: list[tuple[str, dict[str, Any]]]) -> None:
    for result_id in ("nope", "jobrun-999999999"):
        with pytest.raises(TaskResultDoesNotExist):
            _backend().get_result(result_id)


def test_a_django_task_is_a_jobs_task_in_the_cli_and_runs_under_the_jobs_lease(
    sent: list[tuple[str, dict[str, Any]]], tmp_path: Path
) -> None:
    assert ADD in registry.task_names()
    out = io.StringIO()
    call_command("jobs", "tasks", "--json", stdout=out)
    listed = {task["name"]: task for task in json.loads(out.getvalue())}
    assert (listed[ADD]["kind"], listed[ADD]["summary"]) == ("django task", "Adds two numbers.")
    call_command("jobs", "add", "sums", "--task", ADD, "--every", "1h", "--args", "[4, 5]",
                 stdout=io.StringIO())  # fmt: skip
    job = Job.objects.get(name="sums")
    run = JobRun.objects.create(job=job, scheduled_for=timezone.now())
    execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert (run.status, run.result, run.lease_key) == (RunStatus.SUCCEEDED, 9, "job:sums")
    assert Lease.objects.get(key="job:sums").token == run.fencing_token
    scheduled = _backend().get_result(f"jobrun-{run.pk}")
    assert (scheduled.status, scheduled.return_value, scheduled.args) == ("SUCCESSFUL", 9, [4, 5])


def test_the_admin_offers_django_tasks(admin_client: Client) -> None:
    page = admin_client.get("/admin/jobs/job/add/").content.decode()
    assert f'value="{ADD}" title="Adds two numbers.">{ADD} (Django task)<' in page


def test_retention_deletes_a_runs_own_lease_with_the_run_and_no_other(
    sent: list[tuple[str, dict[str, Any]]], tmp_path: Path, make_job: Any
) -> None:
    from jobs.upkeep.retention import prune

    ended = _run(django_tasks.add.enqueue(1, 2))
    execute_run(ended.pk, task_id="t", node="n")
    job = make_job("sums", task=ADD, kwargs={"a": 1, "b": 1})
    scheduled = JobRun.objects.create(job=job, scheduled_for=timezone.now())
    execute_run(scheduled.pk, task_id="s", node="n")
    log, release = tmp_path / "spans.log", tmp_path / "release"
    running = _run(django_tasks.span.enqueue(str(log), "slow", release=str(release)))
    worker = worker_holding_its_lease(running.pk)
    keys = dict(JobRun.objects.values_list("pk", "lease_key"))
    assert Lease.objects.filter(key__in=keys.values()).count() == 3

    pruned = prune(now=timezone.now() + timedelta(days=1), retention={"succeeded": timedelta(0)})
    assert pruned.deleted["succeeded"] == 2
    remaining = set(Lease.objects.filter(key__in=keys.values()).values_list("key", flat=True))
    # The job's own key keeps its token; the running run's lease is live.
    assert remaining == {keys[scheduled.pk], keys[running.pk]}
    release.touch()
    worker.join()


def test_aenqueue_and_aget_result_and_the_enqueued_signal(
    sent: list[tuple[str, dict[str, Any]]],
) -> None:
    from asgiref.sync import async_to_sync
    from django.tasks.signals import task_enqueued

    heard: list[str] = []

    def hear(sender: Any, task_result: Any, **_: Any) -> None:
        heard.append(task_result.id)

    task_enqueued.connect(hear)
    try:
        result = async_to_sync(django_tasks.add.aenqueue)(20, 22)
    finally:
        task_enqueued.disconnect(hear)
    assert heard == [result.id]
    _work(result)
    done = async_to_sync(django_tasks.add.aget_result)(result.id)
    assert (done.status, done.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


def test_concurrent_first_enqueues_make_one_job(sent: list[tuple[str, dict[str, Any]]]) -> None:
    import threading

    from django.db import connection

    start = threading.Barrier(4)
    ids: list[str] = []

    def enqueue(n: int) -> None:
        try:
            start.wait()
            ids.append(django_tasks.add.enqueue(n, n).id)
        finally:
            connection.close()

    threads = [threading.Thread(target=enqueue, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(ids) == 4, "every enqueue recorded its run"
    assert Job.objects.filter(name=ADD).count() == 1
    assert JobRun.objects.filter(job__name=ADD).count() == 4


def test_under_task_always_eager_enqueue_runs_here_under_its_lease(
    sent: list[tuple[str, dict[str, Any]]], request: pytest.FixtureRequest
) -> None:
    conf = current_app.conf
    assert not conf.task_always_eager
    conf.update(task_always_eager=True)
    request.addfinalizer(lambda: conf.update(task_always_eager=False))
    result = django_tasks.add.enqueue(3, 4)
    assert (result.status, result.return_value, result.worker_ids) == ("SUCCESSFUL", 7, ["eager"])
    failed = django_tasks.boom.enqueue("eagerly")
    assert failed.status == TaskResultStatus.FAILED
    assert failed.errors[0].exception_class is ValueError
    assert sent == [], "nothing published"
    run = _run(result)
    assert run.lease_key == f"job:{ADD}:run-{run.pk}" and run.fencing_token is not None


def test_a_task_that_calls_sys_exit_is_failed_at_once_and_gives_its_lease_back(
    sent: list[tuple[str, dict[str, Any]]],
) -> None:
    result = django_tasks.exit_by.enqueue("sys.exit")
    done = _work(result)
    assert done.status == TaskResultStatus.FAILED
    [error] = done.errors
    assert error.exception_class is SystemExit
    assert error.traceback.endswith("SystemExit: 1\n")
    run = _run(result)
    assert lease_module.acquire(run.lease_key, "someone", 30) is not None, "lease given back"


def test_a_keyboard_interrupt_is_failed_and_under_eager_raised_again(
    sent: list[tuple[str, dict[str, Any]]], request: pytest.FixtureRequest
) -> None:
    """On a worker it can only be the task's own: a failure. Run here (task_always_eager), it
    may be the user's Ctrl-C: recorded failed, then raised, as Django's ImmediateBackend lets
    it through."""
    on_worker = _work(django_tasks.exit_by.enqueue("KeyboardInterrupt"))
    assert on_worker.status == TaskResultStatus.FAILED
    assert on_worker.errors[0].exception_class is KeyboardInterrupt
    conf = current_app.conf
    conf.update(task_always_eager=True)
    request.addfinalizer(lambda: conf.update(task_always_eager=False))
    with pytest.raises(KeyboardInterrupt):
        django_tasks.exit_by.enqueue("KeyboardInterrupt")
    newest = JobRun.objects.filter(job__name=django_tasks.exit_by.module_path).latest("pk")
    assert (newest.status, newest.node) == (RunStatus.FAILED, "eager")


@pytest.mark.parametrize(("kind", "stored"), [("bytes", "abc"), ("tuple", [1, [2, "x"]])])
def test_a_return_value_is_kept_as_djangos_backends_keep_it(
    sent: list[tuple[str, dict[str, Any]]], kind: str, stored: Any
) -> None:
    done = _work(django_tasks.give_back.enqueue(kind))
    assert (done.status, done.return_value) == (TaskResultStatus.SUCCESSFUL, stored)


@pytest.mark.parametrize(
    ("kind", "raised", "message"),
    [
        ("datetime", TypeError, "Unsupported type"),
        ("lambda", TypeError, "Unsupported type"),
        ("non-utf8", ValueError, "Unsupported value"),
        ("nan", ValueError, "not a number JSON can store"),
    ],
)
def test_a_return_value_json_cannot_hold_fails_the_task(
    sent: list[tuple[str, dict[str, Any]]], kind: str, raised: type, message: str
) -> None:
    done = _work(django_tasks.give_back.enqueue(kind))
    assert done.status == TaskResultStatus.FAILED
    [error] = done.errors
    assert error.exception_class is raised
    assert message in error.traceback
    assert _run(done).result is None


def test_arguments_are_kept_as_djangos_backends_keep_them(
    sent: list[tuple[str, dict[str, Any]]],
) -> None:
    result = django_tasks.echo.enqueue(b"abc", (1, 2), key=b"v")
    assert (result.args, result.kwargs) == (["abc", [1, 2]], {"key": "v"})
    done = _work(result)
    assert done.return_value == {
        "args": ["abc", [1, 2]],
        "kwargs": {"key": "v"},
        "types": ["str", "list"],
    }


def test_arguments_json_cannot_hold_are_refused_at_enqueue(
    sent: list[tuple[str, dict[str, Any]]],
) -> None:
    with pytest.raises(TypeError, match="Unsupported type"):
        django_tasks.echo.enqueue(timezone.now())
    with pytest.raises(ValueError, match="Unsupported value"):
        django_tasks.echo.enqueue(key=b"\xff")
    assert not JobRun.objects.filter(job__name=django_tasks.echo.module_path).exists()
    assert sent == []


def test_task_started_and_task_finished_are_sent_and_logged(
    sent: list[tuple[str, dict[str, Any]]], caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """Where Django sends them: started as the call begins (RUNNING), finished once the outcome
    is on record (a receiver reading the result finds it finished), none while a retry
    follows; Django's own receivers log each state."""
    from django.tasks.signals import task_finished, task_started

    heard: list[tuple[str, str, str]] = []

    def started(sender: Any, task_result: Any, **_: Any) -> None:
        heard.append(("started", task_result.id, task_result.status))

    def finished(sender: Any, task_result: Any, **_: Any) -> None:
        assert sender is ClusterTaskBackend
        read_back = _backend().get_result(task_result.id)
        heard.append(("finished", task_result.id, read_back.status))

    task_started.connect(started)
    task_finished.connect(finished)
    try:
        with caplog.at_level("INFO", logger="django.tasks"):
            added = _work(django_tasks.add.enqueue(1, 2))
            failed = _work(django_tasks.boom.enqueue("signalled"))
            retried = django_tasks.flaky.enqueue(str(tmp_path / "flaky.log"))
            _work(retried)
            after_retry = list(heard)
            _work(retried)
    finally:
        task_started.disconnect(started)
        task_finished.disconnect(finished)
    assert heard == [
        ("started", added.id, "RUNNING"),
        ("finished", added.id, "SUCCESSFUL"),
        ("started", failed.id, "RUNNING"),
        ("finished", failed.id, "FAILED"),
        ("started", retried.id, "RUNNING"),
        ("started", retried.id, "RUNNING"),
        ("finished", retried.id, "SUCCESSFUL"),
    ]
    assert after_retry[-1] == ("started", retried.id, "RUNNING"), "no finish before the retry"
    lines = [r.getMessage() for r in caplog.records if r.name == "django.tasks"]
    assert f"Task id={added.id} path={ADD} state=RUNNING" in lines
    assert f"Task id={added.id} path={ADD} state=SUCCESSFUL" in lines
    assert f"Task id={failed.id} path={django_tasks.boom.module_path} state=FAILED" in lines


def test_enqueue_stores_any_text_as_given_or_refuses_it_naming_the_arguments(
    sent: list[tuple[str, dict[str, Any]]],
) -> None:
    """Every code point, lone surrogates and NUL included (issue 41): a run whose arguments read
    back as given, or a ``TypeError`` saying which arguments cannot be stored; never a database
    error, and nothing recorded for a refusal."""

    @fuzz_settings(60)
    @given(
        note=st.one_of(st.sampled_from([*UNENCODABLE, "\x00"]), any_text()), keyword=st.booleans()
    )
    def enqueue(note: str, keyword: bool) -> None:
        before = JobRun.objects.count()
        try:
            result: Any = (
                django_tasks.introspect.enqueue(note=note)
                if keyword
                else django_tasks.boom.enqueue(note)
            )
        except TypeError as exc:
            assert ("kwargs" if keyword else "args") in str(exc), str(exc)
            assert "cannot be stored" in str(exc), str(exc)
            assert JobRun.objects.count() == before
            return
        run = _run(result)
        assert (run.args, run.kwargs) == (([], {"note": note}) if keyword else ([note], {}))

    enqueue()
