"""A plain Celery task (``@shared_task``, no ``@job``) as a job's task: listed and validated like
a job function, sent to the guarded runner task (never to its own task), and run under the same
claim, lease, fencing, overlap and history as ``@job`` functions. Real PostgreSQL."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from celery import current_app
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from jobs import registry
from jobs.audit import Actor
from jobs.broker import dispatch
from jobs.guard import lease
from jobs.guard.runner import execute_run
from jobs.models import Job, JobRun, RunStatus, Trigger
from jobs.schedule.kinds import Every
from tests.support.job_factory import new_job
from tests.support.worker_threads import lease_taken_mid_run

pytestmark = pytest.mark.django_db(transaction=True)

APPEND = "tests.support.plain_tasks.append"
BOUND = "tests.support.plain_tasks.bound"
WITH_CTX = "tests.support.plain_tasks.with_ctx"
FENCED = "tests.support.plain_tasks.fenced_write"
BOOM = "tests.support.plain_tasks.boom"
HOURLY = Every(3600)
TESTS = Actor.code("tests")


def _run_for(job: Job) -> JobRun:
    return JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.SCHEDULED)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


# --- what is offered ----------------------------------------------------------------------


def test_the_registry_offers_project_tasks_and_of_celerys_own_the_cleanup() -> None:
    names = registry.task_names()
    assert {APPEND, BOUND, WITH_CTX, "tests.record"} <= set(names)
    # Celery's own tasks are its machinery, but for the cleanup Celery's beat schedules itself.
    assert [name for name in names if name.startswith("celery.")] == [registry.BACKEND_CLEANUP]
    assert registry.RUN_TASK not in names
    assert registry.is_registered(APPEND) and not registry.is_registered("celery.chord_unlock")
    assert registry.get(APPEND).plain and not registry.get("tests.record").plain


def test_jobs_tasks_lists_plain_tasks_with_their_kind() -> None:
    out = io.StringIO()
    call_command("jobs", "tasks", "--json", stdout=out)
    by_name = {record["name"]: record for record in json.loads(out.getvalue())}
    assert by_name[APPEND] == {
        "name": APPEND,
        "kind": "celery task",
        "summary": "Append a line (note, pid, time); optionally work a while first.",
        "schedule": None,
    }
    assert by_name["tests.record"]["kind"] == "job function"


def test_jobs_add_takes_a_plain_task_with_args_and_kwargs(tmp_path: Path) -> None:
    log = str(tmp_path / "log")
    call_command(
        "jobs", "add", "plain", "--task", APPEND, "--every", "10s",
        "--args", json.dumps([log]), "--kwargs", json.dumps({"note": "hi"}),
        stdout=io.StringIO(),
    )  # fmt: skip
    job = Job.objects.get(name="plain")
    assert (job.task, job.args, job.kwargs) == (APPEND, [log], {"note": "hi"})


def test_the_admin_chooser_offers_plain_tasks(client: Client) -> None:
    client.force_login(User.objects.create_superuser("admin", "a@example.com", "pw"))
    response = client.get("/admin/jobs/job/add/")
    field = response.context["adminform"].form.fields["task"]
    choices = dict(field.choices)
    assert choices[APPEND] == f"{APPEND} (Celery task)"
    summary = "Append a line (note, pid, time); optionally work a while first."
    assert field.widget.summaries[APPEND] == summary  # the option's title
    assert "celery.chord_unlock" not in choices and registry.RUN_TASK not in choices


@pytest.mark.parametrize(
    ("task", "args", "kwargs", "field", "message"),
    [
        (APPEND, [], {}, "args", "missing a required argument: 'log'"),
        (APPEND, ["l"], {"colour": 1}, "kwargs", "unexpected keyword argument 'colour'"),
        (WITH_CTX, ["l"], {"ctx": 1}, "kwargs", "'ctx' is given by the runner"),
        ("celery.chord_unlock", [], {}, "task", "is not a registered job function or Celery"),
    ],
)
def test_arguments_that_do_not_fit_a_plain_task_are_refused_on_their_field(
    task: str, args: list[Any], kwargs: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(ValidationError) as info:
        new_job("bad", task, args=args, kwargs=kwargs)
    assert message in " ".join(info.value.message_dict[field])
    assert not Job.objects.filter(name="bad").exists()


def test_a_continuous_job_needs_a_task_that_watches_ctx() -> None:
    with pytest.raises(ValidationError) as info:
        new_job("loop", APPEND, args=["l"], schedule=None)
    assert "can only be periodic" in info.value.message_dict["kind"][0]
    assert new_job("loop", WITH_CTX, args=["l"], schedule=None).kind == "continuous"


# --- how a run is sent ----------------------------------------------------------------------


def test_a_plain_task_run_goes_to_the_guarded_runner_shadowed_as_the_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(current_app, "send_task", lambda name, **opts: sent.append((name, opts)))
    job = new_job("nightly", APPEND, args=["l"])
    run = _run_for(job)
    assert dispatch.publish_many([(job, run.pk, run.scheduled_for)]) == 1
    [(name, options)] = sent
    assert name == registry.RUN_TASK  # never APPEND itself: it would run unguarded
    assert options["shadow"] == "nightly"
    assert options["kwargs"]["run_id"] == run.pk


def test_a_job_naming_celerys_own_task_is_never_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[str] = []
    monkeypatch.setattr(current_app, "send_task", lambda name, **opts: sent.append(name))
    job = new_job("cleanup", APPEND, args=["l"])
    Job.objects.filter(pk=job.pk).update(task="celery.chord_unlock")
    job.refresh_from_db()
    run = _run_for(job)
    assert dispatch.publish_many([(job, run.pk, run.scheduled_for)]) == 0
    assert sent == []
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "not sent to any worker" in run.error


# --- how a run executes ---------------------------------------------------------------------


def test_a_plain_task_runs_once_under_the_lease_with_its_arguments(tmp_path: Path) -> None:
    log = tmp_path / "log"
    run = _run_for(new_job("plain", APPEND, args=[str(log)], kwargs={"note": "hello"}))
    execute_run(run.pk, task_id="task-1", node="node-a")
    execute_run(run.pk, task_id="task-1", node="node-b")  # a redelivery
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.result == "hello"
    assert run.fencing_token == 1 and run.lease_key == "job:plain"
    assert run.duplicate_deliveries == 1
    assert [line.split()[0] for line in _lines(log)] == ["hello"]
    assert lease.acquire("job:plain", "someone", 30) is not None  # given back at once


def test_a_bound_task_gets_itself_first(tmp_path: Path) -> None:
    log = tmp_path / "log"
    run = _run_for(new_job("bound", BOUND, args=[str(log)], kwargs={"note": "b"}))
    execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert (run.status, run.result) == (RunStatus.SUCCEEDED, BOUND)
    assert _lines(log) == [f"b {BOUND}"]


def test_a_task_declaring_ctx_gets_the_runs_context(tmp_path: Path) -> None:
    log = tmp_path / "log"
    run = _run_for(new_job("ctx", WITH_CTX, args=[str(log)]))
    execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert run.result == {"run_id": run.pk, "token": run.fencing_token, "stopped": False}
    assert _lines(log) == [f"{run.pk} {run.fencing_token} job:ctx False"]


def test_a_plain_task_is_skipped_while_another_run_holds_the_lease(tmp_path: Path) -> None:
    log = tmp_path / "log"
    job = new_job("plain", APPEND, args=[str(log)])
    assert lease.acquire(job.lock_key, "other-node:1:run-99", 30) is not None
    run = _run_for(job)
    execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert run.status == RunStatus.SKIPPED and "other-node:1:run-99" in run.error
    assert _lines(log) == []


def test_a_plain_task_whose_lease_is_taken_away_is_recorded_lost(tmp_path: Path) -> None:
    log = tmp_path / "log"
    job = new_job("slow", APPEND, args=[str(log)], kwargs={"seconds": 2.0}, lease_ttl=3)
    run = _run_for(job)
    newer = lease_taken_mid_run(run.pk, job.lock_key)
    run.refresh_from_db()
    # The task finished its work, but its finish was fenced out: not recorded succeeded.
    assert len(_lines(log)) == 1
    assert run.status == RunStatus.LOST and newer.token > (run.fencing_token or 0)


def test_a_task_with_ctx_sees_stopping_and_its_fenced_write_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "log"
    job = new_job("fenced", FENCED, args=[str(log)], lease_ttl=3)
    run = _run_for(job)
    lease_taken_mid_run(run.pk, job.lock_key)
    assert _lines(log) == ["fenced out"]
    run.refresh_from_db()
    assert run.status == RunStatus.LOST


def test_a_failing_plain_task_is_recorded_and_retried_per_the_job(
    published: list[tuple[int, Any]],
) -> None:
    run = _run_for(new_job("boom", BOOM, max_retries=1))
    execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error == "RuntimeError: boom from a plain task"
    assert "raise RuntimeError" in run.traceback
    retry = JobRun.objects.get(retry_of=run)
    assert (retry.trigger, retry.attempt) == (Trigger.RETRY, 2)
    assert [run_id for run_id, _ in published] == [retry.pk]
