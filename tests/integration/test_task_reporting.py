"""What Celery (so Flower) is told about runs, against real PostgreSQL and Redis: the task's
outcome once the run is recorded, the job's name on its messages, and no Flower link for
continuous tenures. Lost runs announced on their dead worker's behalf: test_task_events.py."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from celery import current_app
from django.conf import settings
from django.test import override_settings
from django.utils import timezone
from kombu import Connection

from jobs.broker import messages as run_messages
from jobs.conf import get_ops_conf
from jobs.exceptions import RunFailed, RunLost
from jobs.guard import run_records
from jobs.models import Job, JobKind, JobRun, RunStatus, Trigger
from jobs.registry import RunTask
from jobs.values import serializers

pytestmark = pytest.mark.django_db(transaction=True)


def _apply(run: JobRun) -> Any:
    """Run the job's Celery task in process, as a worker's pool would (its result, not raised)."""
    task = current_app.tasks[run.job.task]
    kwargs = {"run_id": run.pk, "job": run.job.name, "slot": run.scheduled_for.isoformat()}
    return task.apply(kwargs=kwargs, task_id=run_messages.task_id_for(run.pk))


def _new_run(job: Job) -> JobRun:
    return JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.MANUAL)


def test_a_failing_jobs_task_fails_with_its_exception_once_the_run_is_recorded(
    make_job: Callable[..., Job],
) -> None:
    run = _new_run(make_job("nightly", task="tests.fail"))

    result = _apply(run)

    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "boom from tests.fail" in run.traceback
    assert result.state == "FAILURE"
    assert isinstance(result.result, RunFailed)
    assert str(result.result) == "ValueError: boom from tests.fail"
    assert isinstance(result.result.__cause__, ValueError)
    assert 'raise ValueError("boom from tests.fail")' in result.traceback
    # Celery logs it as an expected failure and acknowledges it: no redelivery.
    assert RunTask.throws == (RunFailed, RunLost) and RunTask.acks_on_failure is True
    assert isinstance(current_app.tasks["tests.fail"], RunTask)


def test_succeeded_skipped_and_duplicate_deliveries_report_what_happened(
    make_job: Callable[..., Job], tmp_path: Any
) -> None:
    job = make_job("report")
    run = _new_run(job)

    succeeded = _apply(run)
    duplicate = _apply(run)

    assert succeeded.state == "SUCCESS"
    assert succeeded.result == {"status": "succeeded", "result": "recorded"}
    assert duplicate.state == "IGNORED"
    run.refresh_from_db()
    assert run.duplicate_deliveries == 1

    held = _new_run(job)
    claim = run_records.claim(held.pk, node="n", pid=1, task_id="t", holder="other:1:run")
    assert claim is not None and claim.lease is not None
    skipped = _apply(_new_run(job))
    assert skipped.state == "SUCCESS"
    assert skipped.result["status"] == RunStatus.SKIPPED
    assert skipped.result["reason"].startswith(f"lease {job.lock_key} held by other:1:run")


@contextmanager
def _queue(name: str) -> Iterator[Any]:
    with Connection(settings.CELERY_BROKER_URL) as conn:
        queue = conn.SimpleQueue(name)
        try:
            yield queue
        finally:
            queue.queue.delete()
            queue.close()


def test_a_job_named_apart_from_its_function_is_shown_under_its_name(
    make_job: Callable[..., Job], monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = f"reporting-{uuid.uuid4().hex[:8]}"
    renamed = make_job("nightly-report", task="tests.record", queue=queue)
    same = make_job("tests.fail", task="tests.fail", queue=queue)
    sent_events: list[dict[str, Any]] = []
    publisher = run_messages._event_publisher(current_app.amqp)
    celery_publish = publisher.publish

    def publish(type: str, fields: dict[str, Any], producer: Any, **options: Any) -> None:
        sent_events.append({"type": type, **fields})
        celery_publish(type, fields, producer, **options)

    monkeypatch.setattr(publisher, "publish", publish)

    with _queue(queue) as messages:
        run_messages.publish(renamed, 41, timezone.now())
        run_messages.publish(same, 42, timezone.now())
        first, second = messages.get(timeout=5), messages.get(timeout=5)

    # The worker runs the function (the task), Celery shows the shadow name (logs, events).
    assert (first.headers["task"], first.headers["shadow"]) == ("tests.record", "nightly-report")
    assert (second.headers["task"], second.headers["shadow"]) == ("tests.fail", None)
    assert first.headers["id"] == "jobrun-41"
    # Celery's task-sent event names the task; the renamed job's says the job's name instead.
    assert [(e["type"], e["uuid"], e["name"]) for e in sent_events] == [
        ("task-sent", "jobrun-41", "nightly-report")
    ]


def test_continuous_tenures_link_to_no_flower_page(make_job: Callable[..., Job]) -> None:
    periodic = _new_run(make_job("report"))
    continuous_job = make_job("poller", task="tests.record", schedule=None)
    assert continuous_job.kind == JobKind.CONTINUOUS
    tenure = JobRun.objects.create(
        job=continuous_job, scheduled_for=timezone.now(), trigger=Trigger.CONTINUOUS
    )
    with override_settings(FLOWER_URL="http://flower.example:5555/"):
        get_ops_conf.cache_clear()
        try:
            assert serializers.flower_task_url(periodic) == (
                f"http://flower.example:5555/task/jobrun-{periodic.pk}"
            )
            assert serializers.flower_task_url(tenure) is None
        finally:
            get_ops_conf.cache_clear()


def test_the_runner_acknowledges_late_whatever_the_projects_celery_settings_say() -> None:
    # A project adopting the app may not set task_acks_late / task_reject_on_worker_lost: the
    # runner's own options keep a dead worker's message for redelivery (the run then ends lost
    # or runs once), as the platform's settings do.
    for name in ("tests.fail", "jobs.run"):
        task = current_app.tasks[name]
        assert isinstance(task, RunTask)
        assert task.acks_late is True and task.reject_on_worker_lost is True
