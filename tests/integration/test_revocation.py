"""What a worker's main process records for ``celery control revoke`` (jobs.guard.revocation),
against real PostgreSQL: the ``task_revoked`` handler and the wrapped ``revoke`` command, called
as Celery calls them. A real worker, revoked and terminated: tests/acceptance/test_revocation.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from celery.worker.control import Panel
from django.utils import timezone

from jobs.broker.messages import task_id_for
from jobs.guard import revocation, run_records
from jobs.models import AuditAction, AuditEntry, Job, JobRun, RunStatus, Trigger
from tests.support.job_factory import new_job

pytestmark = pytest.mark.django_db(transaction=True)


def _run(job: Job) -> JobRun:
    return JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.MANUAL)


def _claimed(job: Job) -> JobRun:
    run = _run(job)
    claim = run_records.claim(run.pk, node="node-x", pid=1, task_id="t", holder="node-x:1:run")
    assert claim is not None and claim.lease is not None
    run.refresh_from_db()
    return run


def _settled() -> None:
    """Until the recording threads the handler started are done."""
    deadline = time.monotonic() + 10
    for thread in threading.enumerate():
        if thread.name.startswith("jobs-revoke-"):
            thread.join(max(0.0, deadline - time.monotonic()))
            assert not thread.is_alive(), "the recording thread did not finish"


def _revoked(run: JobRun, **signal: Any) -> JobRun:
    request = SimpleNamespace(id=task_id_for(run.pk), hostname="worker@host")
    sender = SimpleNamespace(name="tests.record")
    revocation.on_task_revoked(sender=sender, request=request, **signal)
    _settled()
    run.refresh_from_db()
    return run


def test_a_discarded_message_cancels_its_unclaimed_run() -> None:
    run = _revoked(_run(new_job("report", log="/dev/null")), terminated=False, expired=False)
    assert run.status == RunStatus.CANCELLED
    assert run.error == "revoked: celery control revoke cancelled it before it started"
    (entry,) = AuditEntry.objects.filter(action=AuditAction.CANCEL)
    assert entry.actor == "celery:revoke" and entry.source == "celery"
    assert entry.after == {
        "status": "cancelled",
        "error": run.error,
        "node": "worker@host",
        "terminated": False,
    }


def test_a_terminated_run_is_cancelled_with_the_signal_named() -> None:
    run = _revoked(_claimed(new_job("report", log="/dev/null")), terminated=True, signum=15)
    assert run.status == RunStatus.CANCELLED
    assert run.error.startswith("revoked with terminate (SIGTERM)")
    (entry,) = AuditEntry.objects.filter(action=AuditAction.CANCEL)
    assert entry.after is not None and entry.after["signal"] == "SIGTERM"


def test_a_revoke_without_terminate_leaves_a_running_run_running() -> None:
    run = _revoked(_claimed(new_job("report", log="/dev/null")), terminated=False)
    assert run.status == RunStatus.RUNNING
    assert not AuditEntry.objects.filter(action=AuditAction.CANCEL).exists()


def test_an_expired_message_and_other_tasks_are_not_cancels() -> None:
    run = _revoked(_run(new_job("report", log="/dev/null")), expired=True)
    assert run.status == RunStatus.SCHEDULED  # maintenance records it missed
    other = SimpleNamespace(id=str(run.pk), hostname="worker@host")  # not a run's task id
    revocation.on_task_revoked(sender=None, request=other, terminated=True, signum=15)
    _settled()
    run.refresh_from_db()
    assert run.status == RunStatus.SCHEDULED


@pytest.fixture
def panel_revoke() -> Iterator[None]:
    original = Panel.data["revoke"]
    try:
        yield
    finally:
        Panel.data["revoke"] = original


def test_the_revoke_command_cancels_unclaimed_runs_after_celery_flags_them(
    panel_revoke: None,
) -> None:
    job = new_job("report", log="/dev/null")
    queued, running = _run(job), _claimed(job)
    calls: list[tuple[Any, Any, dict[str, Any]]] = []

    def celery_revoke(state: Any, task_id: Any, **arguments: Any) -> dict[str, str]:
        # Celery flags the ids first, so a worker discards the message before the cancel.
        assert JobRun.objects.get(pk=queued.pk).status == RunStatus.SCHEDULED
        calls.append((state, task_id, arguments))
        return {"ok": "flagged"}

    Panel.data["revoke"] = celery_revoke
    revocation.install_revoke_command()
    state = SimpleNamespace(consumer=SimpleNamespace(hostname="worker@host"))
    ids = [task_id_for(queued.pk), task_id_for(running.pk), "not-a-run"]
    assert Panel.data["revoke"](state, ids, terminate=True) == {"ok": "flagged"}
    _settled()
    assert calls == [(state, ids, {"terminate": True})]
    assert JobRun.objects.get(pk=queued.pk).status == RunStatus.CANCELLED
    # A running run is its own worker's to terminate (task_revoked), never cancelled here.
    assert JobRun.objects.get(pk=running.pk).status == RunStatus.RUNNING
    (entry,) = AuditEntry.objects.filter(action=AuditAction.CANCEL)
    assert entry.target == f"run:{queued.pk}"
