"""Calling a Django ``@task`` for one run (jobs.django_tasks.execution), as Django's own backends
call it: a plain function with its arguments, a coroutine function to its end, and a task that
takes context with this run's ``RUNNING`` result.

Django 5.2 has no ``django.tasks``: skipped there (CI runs this module on Django 6 too)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

pytest.importorskip("django.tasks")

from celery import current_app
from django.utils import timezone

from jobs.context import JobContext
from jobs.django_tasks.execution import call_task
from jobs.models import JobRun, RunStatus, Trigger
from tests.support import django_tasks

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def sent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Enqueueing publishes nothing: these tests call the task themselves, as the worker would."""
    monkeypatch.setattr(current_app, "send_task", lambda name, **options: None)


def _ctx(run: JobRun) -> JobContext:
    return JobContext(
        job_name=run.job.name, run_id=run.pk, scheduled_for=run.scheduled_for,
        fencing_token=run.fencing_token, attempt=run.attempt, lease_key=run.lease_key,
        stopping=threading.Event(),
    )  # fmt: skip


def _running(result_id: str) -> JobRun:
    """The run of ``result_id`` as the runner has it when it calls the function: claimed."""
    run = JobRun.objects.select_related("job").get(pk=int(result_id.removeprefix("jobrun-")))
    JobRun.objects.filter(pk=run.pk).update(
        status=RunStatus.RUNNING, started_at=timezone.now() - timedelta(seconds=1), node="w1"
    )
    run.refresh_from_db()
    return run


def test_a_task_is_called_with_the_runs_arguments() -> None:
    run = _running(django_tasks.add.enqueue(2, b=3).id)
    assert call_task(django_tasks.add, _ctx(run), [2], {"b": 3}) == 5


def test_a_coroutine_task_runs_to_its_end() -> None:
    run = _running(django_tasks.double.enqueue(21).id)
    assert call_task(django_tasks.double, _ctx(run), [21], {}) == 42


def test_a_task_that_takes_context_gets_this_runs_running_result() -> None:
    result = django_tasks.introspect.enqueue(note="hi")
    run = _running(result.id)
    seen = call_task(django_tasks.introspect, _ctx(run), [], {"note": "hi"})
    assert seen == {"attempt": 1, "id": result.id, "status": "RUNNING", "note": "hi"}


def test_a_retry_that_takes_context_counts_the_attempts_before_it() -> None:
    result = django_tasks.introspect.enqueue(note="again")
    first = _running(result.id)
    JobRun.objects.filter(pk=first.pk).update(
        status=RunStatus.FAILED, finished_at=timezone.now(), traceback="T\nRuntimeError: x\n"
    )
    retry = JobRun.objects.create(
        job=first.job, scheduled_for=first.scheduled_for, trigger=Trigger.RETRY, attempt=2,
        retry_of=first, status=RunStatus.RUNNING, started_at=timezone.now(), node="w2",
    )  # fmt: skip
    seen = call_task(django_tasks.introspect, _ctx(retry), [], {"note": "again"})
    assert seen == {"attempt": 2, "id": result.id, "status": "RUNNING", "note": "again"}
