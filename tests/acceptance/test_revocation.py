"""Issue 40: ``celery control revoke`` is an operator's cancel, on a real prefork worker.

A run revoked while its message waits in the queue is recorded ``cancelled`` at once, never
runs, and maintenance neither re-publishes it nor records it ``missed``; a run revoked with
terminate while it runs is recorded ``cancelled`` within a couple of seconds, its lease given
back (the job's next run runs, not skipped behind a lease held for its ttl) and its token no
longer valid. Both leave an audit entry. On Redis and on RabbitMQ."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from django.db import connection, transaction

from jobs.audit import Actor
from jobs.broker.messages import publish, task_id_for
from jobs.exceptions import LeaseLost
from jobs.guard import lease
from jobs.models import (
    AuditAction,
    AuditEntry,
    AuditSource,
    Job,
    JobRun,
    Lease,
    RunStatus,
    Trigger,
)
from jobs.schedule.kinds import Every
from jobs.services import JobDefinition, create_job
from jobs.upkeep import maintenance
from tests.acceptance.conftest import ROOT, Broker, Cluster, wait_for

pytestmark = pytest.mark.acceptance

# From the revoke to the run's cancel on record: the broadcast, one thread, one statement.
RECORDED_WITHIN = 2.0
START_DEADLINE = 5


def _job(cluster: Cluster, name: str, task: str, **kwargs: object) -> Job:
    return create_job(
        JobDefinition(
            name=name,
            task=task,
            schedule=Every(86400),
            enabled=False,  # only the runs the test triggers
            kwargs=dict(kwargs),
            policies={"queue": cluster.queue, "start_deadline": START_DEADLINE},
        ),
        actor=Actor.code("tests"),
    )


def _send(broker: Broker, job: Job) -> JobRun:
    """A run of ``job`` now, its message sent to the test's broker (the test process's own
    Celery app points at the suite's Redis). Left unstamped as sent, as a run whose beat died
    before stamping it: a maintenance pass re-publishes such a run as soon as it is asked to."""
    run = JobRun.objects.create(job=job, scheduled_for=_db_now(), trigger=Trigger.MANUAL)
    with broker.producer() as producer:
        publish(job, run.pk, run.scheduled_for, producer=producer)
    return run


def _status(run: JobRun) -> str:
    return JobRun.objects.values_list("status", flat=True).get(pk=run.pk)


def _db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone()
    return now


def _celery(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """A ``celery -A project`` command as an operator types it, against the cluster's broker."""
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "project", *args],
        env=cluster.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _cancel_entry(run: JobRun) -> AuditEntry:
    entries = AuditEntry.objects.filter(action=AuditAction.CANCEL, target=f"run:{run.pk}")
    assert entries.count() == 1, list(entries.values())
    return entries.get()


def test_a_queued_run_revoked_is_cancelled_never_runs_and_is_not_republished(
    cluster: Cluster, broker: Broker, tmp_path: Path
) -> None:
    cluster.use_broker(broker.url)
    hold = tmp_path / "hold"
    hold.touch()
    log = tmp_path / "executions.log"
    blocker_log = str(tmp_path / "blocker.log")
    blocker = _job(cluster, "blocker", "tests.hold", log=blocker_log, hold=str(hold))
    target = _job(cluster, "target", "tests.record", log=str(log))
    cluster.start_worker("worker", concurrency=1)
    cluster.wait_ready("worker", timeout=90)

    busy = _send(broker, blocker)
    wait_for(lambda: _status(busy) == RunStatus.RUNNING, timeout=30, what="the blocker running")
    queued = _send(broker, target)  # behind the blocker

    revoked = _celery(cluster, "control", "revoke", task_id_for(queued.pk))
    assert revoked.returncode == 0, revoked.stdout + revoked.stderr
    # At once, while the worker is still busy and the message still waits in the queue.
    wait_for(
        lambda: _status(queued) == RunStatus.CANCELLED,
        timeout=RECORDED_WITHIN,
        what="the queued run recorded cancelled",
        poll=0.05,
    )
    assert _status(busy) == RunStatus.RUNNING

    hold.unlink()  # the worker takes the revoked message next, and discards it
    wait_for(
        lambda: any(
            "Discarding revoked task" in line and f"[{task_id_for(queued.pk)}]" in line
            for line in cluster.log_of("worker").splitlines()
        ),
        timeout=30,
        what="the worker discarding the revoked message",
    )
    wait_for(lambda: _status(busy) == RunStatus.SUCCEEDED, timeout=30, what="the blocker done")

    # A maintenance pass past the run's start deadline, re-publishing at once what was never
    # stamped sent: a run still scheduled would be recorded missed (or, within its deadline,
    # re-published). This one is neither.
    wait_for(
        lambda: (_db_now() - queued.scheduled_for).total_seconds() > START_DEADLINE,
        timeout=START_DEADLINE + 5,
        what="the run's start deadline passed",
    )
    with broker.producer() as producer:
        report = maintenance.run_pass(holder="tests", republish_after=0, producer=producer)
    assert report is not None
    assert (report.expired, report.republished) == (0, 0), report
    run = JobRun.objects.get(pk=queued.pk)
    assert run.status == RunStatus.CANCELLED
    assert run.dispatched_at is None  # not taken for re-publishing
    assert run.error == "revoked: celery control revoke cancelled it before it started"
    assert run.started_at is None and run.fencing_token is None
    assert not log.exists(), log.read_text()  # the job's function never ran
    assert not Lease.objects.filter(key=target.lock_key).exists()

    entry = _cancel_entry(run)
    assert (entry.actor, entry.source) == ("celery:revoke", AuditSource.CELERY)
    assert entry.job_id == target.pk
    assert entry.before == {"status": "scheduled"}
    assert entry.after is not None and entry.after["status"] == "cancelled"
    assert entry.after["node"].startswith("worker@") and entry.after["terminated"] is False


def test_a_running_run_revoked_with_terminate_is_cancelled_and_frees_its_lease(
    cluster: Cluster, broker: Broker, tmp_path: Path
) -> None:
    cluster.use_broker(broker.url)
    hold = tmp_path / "hold"
    hold.touch()
    log = tmp_path / "executions.log"
    job = _job(cluster, "stuck", "tests.hold", log=str(log), hold=str(hold))
    assert job.lease_ttl == 30  # without the release, the next run would be skipped for 30 s
    cluster.start_worker("worker", concurrency=2)
    cluster.wait_ready("worker", timeout=90)

    first = _send(broker, job)
    wait_for(lambda: _status(first) == RunStatus.RUNNING, timeout=30, what="the run running")
    running = JobRun.objects.get(pk=first.pk)
    token, pid = running.fencing_token, running.pid
    assert token is not None and pid is not None

    # As an operator stops it (app.control.revoke(..., terminate=True) sends the same
    # command; from this process it would go to the suite's broker, Celery's mailbox
    # publishing through the app's own producer pool).
    terminated = _celery(cluster, "control", "terminate", "SIGTERM", task_id_for(first.pk))
    assert terminated.returncode == 0, terminated.stdout + terminated.stderr
    wait_for(
        lambda: _status(first) == RunStatus.CANCELLED,
        timeout=RECORDED_WITHIN,
        what="the terminated run recorded cancelled",
        poll=0.05,
    )

    run = JobRun.objects.get(pk=first.pk)
    assert run.error == (
        "revoked with terminate (SIGTERM): celery control revoke stopped it while it ran"
    )
    # Its lease given back with its token, and the token no longer valid for fenced writes.
    held = Lease.objects.get(key=job.lock_key)
    assert held.token == token and held.expires_at <= _db_now()
    with transaction.atomic(), pytest.raises(LeaseLost):
        lease.verify_held(job.lock_key, token)

    # The pool process that ran it was killed: it never reached its own finish.
    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_for(gone, timeout=10, what="the terminated pool process gone")
    hold.unlink()
    second = _send(broker, job)
    wait_for(
        lambda: _status(second) not in (RunStatus.SCHEDULED, RunStatus.RUNNING),
        timeout=30,
        what="the next run ended",
    )
    assert _status(second) == RunStatus.SUCCEEDED  # not skipped behind a held lease
    second = JobRun.objects.get(pk=second.pk)
    assert second.fencing_token is not None and second.fencing_token > token
    # Only the second run's line: the first never wrote, and stays cancelled.
    assert [line.split()[0] for line in log.read_text().splitlines()] == [str(second.pk)]
    assert _status(first) == RunStatus.CANCELLED

    entry = _cancel_entry(run)
    assert (entry.actor, entry.source) == ("celery:revoke", AuditSource.CELERY)
    assert entry.before == {"status": "running"}
    assert entry.after is not None
    assert (entry.after["status"], entry.after["terminated"], entry.after["signal"]) == (
        "cancelled",
        True,
        "SIGTERM",
    )
