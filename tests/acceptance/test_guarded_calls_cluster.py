"""Guarded calls on real processes (``base=GuardedTask``, ``jobs.calls``): ``.delay()`` from this
process, run by two workers through the runner task. Executions are read from the task's own
file (start and end of each), runs from the database: concurrent calls never overlap, and a call
while a scheduled run (fired by a real beat) holds the lease is skipped or waits, per the job's
overlap policy, and recorded; a call on a worker killed -9 is recorded lost and retried, with the
call's arguments, on the other."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from jobs.audit import Actor
from jobs.models import Job, JobRun, RunStatus, Trigger
from jobs.schedule.kinds import Every
from jobs.services import pause
from jobs.upkeep.recovery import recover_lost_runs
from tests.acceptance.conftest import Cluster, wait_for
from tests.support.job_factory import new_job
from tests.support.plain_tasks import guarded_span

pytestmark = pytest.mark.acceptance

SPAN = "tests.support.plain_tasks.guarded_span"
SLOT_SPAN = {"note": "slot", "seconds": 3}  # the scheduled runs' arguments besides the log
TESTS = Actor.code("tests")
START_TIMEOUT = 90
BEAT_ENV = {"JOBS_MAINTENANCE_INTERVAL": "0.5", "JOBS_REPUBLISH_AFTER": "2"}


def _spans(log: Path) -> list[tuple[str, float, float]]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [(note, float(start), float(end)) for note, start, end, _ in map(str.split, lines)]


def _overlapping(spans: list[tuple[str, float, float]]) -> list[tuple[str, str]]:
    ordered = sorted(spans, key=lambda span: span[1])
    return [(a[0], b[0]) for a, b in itertools.combinations(ordered, 2) if b[1] < a[2]]


def _two_workers_ready(cluster: Cluster) -> None:
    cluster.start_worker("worker-a")
    cluster.start_worker("worker-b")
    cluster.wait_ready("worker-a", "worker-b", timeout=START_TIMEOUT)


def _called_only(cluster: Cluster, log: Path, **policies: Any) -> Job:
    """The job ``sync`` of the guarded task, hourly and with no beat: the calls are its only
    runs."""
    return new_job(
        "sync", SPAN, Every(3600), kwargs=SLOT_SPAN, log=log, queue=cluster.queue, **policies
    )


def _settled(runs: list[int]) -> bool:
    pending = (RunStatus.SCHEDULED, RunStatus.RUNNING)
    return not JobRun.objects.filter(pk__in=runs, status__in=pending).exists()


def test_concurrent_calls_run_one_at_a_time_on_two_workers(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "spans.log"
    _two_workers_ready(cluster)
    job = _called_only(cluster, log, overlap="wait", start_deadline=120)
    ids: list[str] = []

    def call(n: int) -> None:
        try:
            ids.append(guarded_span.delay(str(log), note=f"call-{n}", seconds=1).id)
        finally:
            connection.close()  # this thread's own

    callers = [threading.Thread(target=call, args=(n,)) for n in range(4)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    runs = [int(task_id.removeprefix("jobrun-")) for task_id in ids]
    wait_for(lambda: _settled(runs), timeout=90, what="the four calls finished")

    recorded = list(JobRun.objects.filter(job=job))
    assert sorted(run.pk for run in recorded) == sorted(runs)
    assert {(run.trigger, run.status) for run in recorded} == {(Trigger.CALL, RunStatus.SUCCEEDED)}
    spans = _spans(log)
    assert sorted(note for note, _, _ in spans) == [f"call-{n}" for n in range(4)]
    assert _overlapping(spans) == [], "two calls ran at once"
    # Each took the lease from the one before: tokens grow in the order the calls executed.
    token_of = {run.kwargs["note"]: run.fencing_token or 0 for run in recorded}  # type: ignore[index]
    tokens = [token_of[note] for note, _, _ in sorted(spans, key=lambda span: span[1])]
    assert tokens == sorted(tokens) and len(set(tokens)) == 4, tokens
    # The workers ran them through the runner task, shown under the job's name.
    logs = cluster.log_of("worker-a") + cluster.log_of("worker-b")
    assert "Task sync[jobrun-" in logs and f"Task {SPAN}[" not in logs


@pytest.mark.parametrize("overlap", ["skip", "wait"])
def test_a_call_while_a_scheduled_run_holds_the_lease(
    cluster: Cluster, tmp_path: Path, overlap: str
) -> None:
    log = tmp_path / "spans.log"
    cluster.start_worker("worker-a")
    cluster.start_worker("worker-b")
    cluster.start_beat("beat-a", env=BEAT_ENV)
    cluster.wait_ready("worker-a", "worker-b", "beat-a", timeout=START_TIMEOUT)
    job = new_job(
        "sync", SPAN, Every(6), kwargs=SLOT_SPAN, log=log, queue=cluster.queue,
        overlap=overlap, start_deadline=30,
    )  # fmt: skip

    def holding() -> JobRun | None:
        return JobRun.objects.filter(
            job=job,
            trigger=Trigger.SCHEDULED,
            status=RunStatus.RUNNING,
            fencing_token__isnull=False,
        ).first()

    wait_for(lambda: holding() is not None, timeout=60, what="a scheduled run holding the lease")
    slot = holding()
    assert slot is not None
    call = int(guarded_span.delay(str(log), note="call").id.removeprefix("jobrun-"))
    wait_for(lambda: _settled([call, slot.pk]), timeout=60, what="the slot and the call finished")
    pause(job.name, actor=TESTS)

    run = JobRun.objects.get(pk=call)
    slot.refresh_from_db()
    assert run.trigger == Trigger.CALL and slot.status == RunStatus.SUCCEEDED
    notes = [note for note, _, _ in _spans(log)]
    if overlap == "skip":
        assert run.status == RunStatus.SKIPPED
        assert "lease job:sync held by" in run.error and f"run-{slot.pk} " in run.error
        assert "call" not in notes
    else:
        # It waited for the slot's lease, then ran under the next token.
        assert run.status == RunStatus.SUCCEEDED and notes.count("call") == 1
        assert run.fencing_token is not None and slot.fencing_token is not None
        assert run.fencing_token > slot.fencing_token
    assert _overlapping(_spans(log)) == [], "the call and a slot ran at once"


def test_a_killed_workers_call_is_recorded_lost_and_retried_with_its_arguments(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "spans.log"
    _two_workers_ready(cluster)
    job = _called_only(cluster, log, lease_ttl=3, on_lost="retry", start_deadline=60)
    call = int(guarded_span.delay(str(log), note="doomed", seconds=8).id.removeprefix("jobrun-"))

    def holding() -> JobRun | None:
        return JobRun.objects.filter(
            pk=call, status=RunStatus.RUNNING, fencing_token__isnull=False
        ).first()

    wait_for(lambda: holding() is not None, timeout=60, what="the call holding the lease")
    doomed = holding()
    assert doomed is not None
    holder, survivor = (
        ("worker-a", "worker-b")
        if doomed.node.startswith("worker-a@")
        else ("worker-b", "worker-a")
    )
    cluster.kill(holder)  # SIGKILL, the whole process group, mid-call

    def recovered() -> bool:
        recover_lost_runs()
        return JobRun.objects.filter(retry_of_id=call).exists()

    wait_for(recovered, timeout=60, what="the call recorded lost and its retry made")
    retry = JobRun.objects.get(retry_of_id=call)
    wait_for(lambda: _settled([retry.pk]), timeout=60, what="the retry finished")
    retry.refresh_from_db()
    doomed.refresh_from_db()
    assert doomed.status == RunStatus.LOST and "lapsed" in doomed.error
    assert (retry.trigger, retry.status) == (Trigger.RETRY, RunStatus.SUCCEEDED)
    assert (retry.args, retry.kwargs) == (doomed.args, doomed.kwargs)
    assert retry.node.startswith(f"{survivor}@")
    assert (retry.fencing_token or 0) > (doomed.fencing_token or 0)
    # The killed call never finished its work; the retry did, once.
    assert [note for note, _, _ in _spans(log)] == ["doomed"]
    assert JobRun.objects.filter(job=job).count() == 2
