"""Per-job policies on the runner, against real PostgreSQL: lock keys from arguments, overlap
wait / replace, retries with backoff, time limits, minimum hold, and the one-statement claim."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone

from jobs.guard import lease, run_records
from jobs.guard.runner import execute_run
from jobs.models import Job, JobRun, Lease, RunStatus, Trigger
from tests.integration.conftest import Published

pytestmark = pytest.mark.django_db(transaction=True)


def _run_for(job: Job, ago: float = 0.0) -> JobRun:
    return JobRun.objects.create(
        job=job, scheduled_for=timezone.now() - timedelta(seconds=ago), trigger=Trigger.MANUAL
    )


@pytest.fixture
def in_thread() -> Iterator[Callable[[int], threading.Thread]]:
    """Start execute_run(run_id) on its own thread (its own connection), as a worker would."""
    threads: list[threading.Thread] = []

    def start(run_id: int) -> threading.Thread:
        def work() -> None:
            try:
                execute_run(run_id, task_id=f"t-{run_id}", node="node-t")
            finally:
                connection.close()

        thread = threading.Thread(target=work)
        thread.start()
        threads.append(thread)
        return thread

    yield start
    for thread in threads:
        thread.join(30)
        assert not thread.is_alive()


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _holds_token(run: JobRun) -> bool:
    return JobRun.objects.filter(pk=run.pk, fencing_token__isnull=False).exists()


def _intervals(log: Path) -> list[tuple[float, float, str]]:
    lines = [line.split() for line in log.read_text().splitlines()]
    return [(float(f[4]), float(f[5]), f[6] if len(f) > 6 else "") for f in lines]


# --- the claim takes the lease in the same statement ------------------------------------------


def test_the_claim_takes_the_lease_and_records_the_token(make_job: Callable[..., Job]) -> None:
    job = make_job()
    run = _run_for(job)
    claim = run_records.claim(run.pk, node="n", pid=1, task_id="t", holder="n:1:run")
    assert claim is not None and claim.status == RunStatus.RUNNING
    assert claim.lease is not None and claim.lease.key == "job:j" and claim.lease.token == 1
    assert claim.job.name == "j" and claim.job.kwargs == job.kwargs
    run.refresh_from_db()
    assert (run.fencing_token, run.lease_key) == (1, "job:j")
    assert Lease.objects.get(key="job:j").holder == "n:1:run"


def test_a_claim_that_finds_the_lease_held_under_skip_records_skipped(
    make_job: Callable[..., Job],
) -> None:
    job = make_job()
    assert lease.acquire(job.lock_key, "busy:1:run-7", 30) is not None
    run = _run_for(job)
    claim = run_records.claim(run.pk, node="n", pid=1, task_id="t", holder="n:1:run")
    assert claim is not None and claim.status == RunStatus.SKIPPED and claim.lease is None
    run.refresh_from_db()
    assert run.status == RunStatus.SKIPPED and run.finished_at is not None
    assert run.error == "lease job:j held by busy:1:run-7 (token 1)"


def test_a_missed_claim_takes_no_lease(make_job: Callable[..., Job]) -> None:
    run = _run_for(make_job(start_deadline=5), ago=60)
    claim = run_records.claim(run.pk, node="n", pid=1, task_id="t", holder="n:1:run")
    assert claim is not None and claim.status == RunStatus.MISSED and claim.lease is None
    assert not Lease.objects.exists()


def test_a_derived_key_is_not_taken_by_the_claim(make_job: Callable[..., Job]) -> None:
    job = make_job(task="tests.by_city", kwargs={"log": "-", "city": "Paris"})
    run = _run_for(job)
    claim = run_records.claim(
        run.pk, node="n", pid=1, task_id="t", holder="h", keyed_tasks=["tests.by_city"]
    )
    assert claim is not None and claim.status == RunStatus.RUNNING and claim.lease is None
    assert not Lease.objects.exists()


# --- lock keys derived from arguments -----------------------------------------------------------


def test_different_derived_keys_run_in_parallel_and_the_same_key_never(
    make_job: Callable[..., Job], tmp_path: Path, in_thread: Callable[[int], threading.Thread]
) -> None:
    log = tmp_path / "cities.log"
    paris = make_job(
        "paris", task="tests.by_city", kwargs={"log": str(log), "city": "Paris", "seconds": 1.5}
    )
    lyon = make_job(
        "lyon", task="tests.by_city", kwargs={"log": str(log), "city": "Lyon", "seconds": 1.5}
    )
    paris_again = make_job(
        "paris-again", task="tests.by_city", kwargs={"log": str(log), "city": "Paris"}
    )
    first, second = _run_for(paris), _run_for(lyon)
    in_thread(first.pk)
    in_thread(second.pk)
    _wait_for(lambda: _holds_token(first) and _holds_token(second), 10, "both cities leased")
    third = _run_for(paris_again)
    execute_run(third.pk, task_id="t", node="n")
    third.refresh_from_db()
    assert third.status == RunStatus.SKIPPED
    assert "lease city:Paris held by" in third.error
    _wait_for(lambda: log.exists() and len(log.read_text().splitlines()) == 2, 20, "2 lines")
    (a_start, a_end, a_key), (b_start, b_end, b_key) = _intervals(log)
    assert {a_key, b_key} == {"city:Paris", "city:Lyon"}
    assert a_start < b_end and b_start < a_end, "different keys should have run at once"
    _wait_for(
        lambda: JobRun.objects.filter(status=RunStatus.SUCCEEDED).count() == 2, 10, "2 succeeded"
    )


def test_a_callable_derives_the_key(make_job: Callable[..., Job], tmp_path: Path) -> None:
    job = make_job(task="tests.by_region", kwargs={"log": str(tmp_path / "l"), "region": "Alps"})
    run = _run_for(job)
    execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.lease_key == "region:alps"
    assert run.fencing_token == 1


def _written_around_validation(job: Job, **kwargs: object) -> None:
    """Arguments the services refuse, stored straight (SQL, an older version)."""
    Job.objects.filter(pk=job.pk).update(kwargs={**job.kwargs, **kwargs})


def test_arguments_the_lock_key_cannot_use_fail_the_run_clearly(
    make_job: Callable[..., Job], tmp_path: Path
) -> None:
    job = make_job(task="tests.by_region", kwargs={"log": str(tmp_path / "l"), "region": "Alps"})
    _written_around_validation(job, region=None)
    run = _run_for(job)
    execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error.startswith("lock key cannot be derived from the arguments: AttributeError(")
    assert not Lease.objects.exists()


def test_a_lock_key_longer_than_the_lease_column_fails_the_run_with_the_reason(
    make_job: Callable[..., Job], tmp_path: Path
) -> None:
    job = make_job(task="tests.by_city", kwargs={"log": str(tmp_path / "l"), "city": "Paris"})
    _written_around_validation(job, city="x" * 300)
    run = _run_for(job)
    execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert (run.status, run.finished_at is not None) == (RunStatus.FAILED, True)
    assert run.error == "lock key is 305 characters long with these arguments, at most 255"
    assert not Lease.objects.exists()


@pytest.mark.parametrize(
    ("task", "kwargs", "message"),
    [
        ("tests.by_city", {"city": "x" * 300}, "is 305 characters long with these arguments"),
        ("tests.by_region", {"region": None}, "cannot be derived from the arguments"),
    ],
)
def test_a_lock_key_the_lease_cannot_use_is_refused_when_the_job_is_defined(
    make_job: Callable[..., Job], task: str, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        make_job(task=task, kwargs={"log": "-", **kwargs})
    assert list(refused.value.message_dict) == ["kwargs"]
    assert f"The lock key of {task} {message}" in refused.value.message_dict["kwargs"][0]
    assert not Job.objects.exists()


# --- overlap wait ---------------------------------------------------------------------------


def test_wait_takes_the_lease_when_it_frees(make_job: Callable[..., Job], tmp_path: Path) -> None:
    job = make_job(kwargs={"log": str(tmp_path / "log")}, overlap="wait")
    other = lease.acquire(job.lock_key, "other", 1.0)
    assert other is not None
    run = _run_for(job)
    execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert run.fencing_token == other.token + 1


def test_wait_gives_up_at_the_start_deadline(make_job: Callable[..., Job], tmp_path: Path) -> None:
    job = make_job(kwargs={"log": str(tmp_path / "log")}, overlap="wait", start_deadline=2)
    assert lease.acquire(job.lock_key, "other:1:run-1", 30) is not None
    run = _run_for(job, ago=1)
    started = time.monotonic()
    execute_run(run.pk, task_id="t", node="n")
    assert time.monotonic() - started < 10
    run.refresh_from_db()
    assert run.status == RunStatus.SKIPPED
    assert "held by other:1:run-1" in run.error and "until the start deadline" in run.error
    assert not (tmp_path / "log").exists()


# --- overlap replace ------------------------------------------------------------------------


def test_replace_stops_the_holder_then_takes_over(
    make_job: Callable[..., Job], tmp_path: Path, in_thread: Callable[[int], threading.Thread]
) -> None:
    log = tmp_path / "log"
    job = make_job(kwargs={"log": str(log), "seconds": 30}, overlap="replace", lease_ttl=3)
    old = _run_for(job)
    in_thread(old.pk)
    _wait_for(lambda: _holds_token(old), 10, "the first run's lease")
    Job.objects.filter(pk=job.pk).update(kwargs={"log": str(log)})  # the next run is quick
    new = _run_for(job)
    started = time.monotonic()
    execute_run(new.pk, task_id="t", node="n")
    assert time.monotonic() - started < 8  # the old run heard the request at a renewal (1 s)
    old.refresh_from_db()
    new.refresh_from_db()
    assert old.status == RunStatus.CANCELLED
    assert old.error.startswith("replaced: n:")
    assert old.error.endswith(f":run-{new.pk} asked this run to stop")
    assert new.status == RunStatus.SUCCEEDED and new.fencing_token == (old.fencing_token or 0) + 1
    (_, old_end, _), (new_start, _, _) = sorted(_intervals(log))
    assert old_end <= new_start, "the replaced run was still running when its successor started"


def test_replace_revokes_a_holder_that_ignores_the_request_after_a_ttl(
    make_job: Callable[..., Job], tmp_path: Path
) -> None:
    job = make_job(kwargs={"log": str(tmp_path / "log")}, overlap="replace", lease_ttl=3)
    deaf = lease.acquire(job.lock_key, "deaf", 3)
    assert deaf is not None
    stop = threading.Event()

    def keep_renewing() -> None:  # a holder alive and renewing, but never stopping
        current = deaf
        try:
            while not stop.wait(0.3):
                renewed = lease.renew(current)
                if renewed is None:
                    return
                current = renewed
        finally:
            connection.close()

    renewer = threading.Thread(target=keep_renewing)
    renewer.start()
    try:
        run = _run_for(job)
        started = time.monotonic()
        execute_run(run.pk, task_id="t", node="n")
        waited = time.monotonic() - started
    finally:
        stop.set()
        renewer.join(10)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.fencing_token == deaf.token + 1
    assert 3 <= waited < 10
    assert lease.renew(deaf) is None  # fenced out


def test_a_replacer_superseded_by_a_newer_holder_records_skipped(
    make_job: Callable[..., Job], tmp_path: Path, in_thread: Callable[[int], threading.Thread]
) -> None:
    job = make_job(kwargs={"log": str(tmp_path / "log")}, overlap="replace", lease_ttl=30)
    first = lease.acquire(job.lock_key, "first", 30)
    assert first is not None
    run = _run_for(job)
    in_thread(run.pk)
    _wait_for(
        lambda: Lease.objects.filter(key=job.lock_key).exclude(stop_requested_by="").exists(),
        10,
        "the stop request",
    )
    assert lease.force_release(job.lock_key)
    assert lease.acquire(job.lock_key, "third", 30) is not None
    _wait_for(lambda: JobRun.objects.get(pk=run.pk).status == RunStatus.SKIPPED, 10, "skipped")
    assert "superseded: lease job:j held by third" in JobRun.objects.get(pk=run.pk).error


# --- retries --------------------------------------------------------------------------------


def test_a_failure_is_retried_with_backoff_until_it_succeeds(
    make_job: Callable[..., Job], tmp_path: Path, published: Published
) -> None:
    log = tmp_path / "log"
    job = make_job(
        task="tests.flaky", kwargs={"log": str(log), "failures": 2}, max_retries=3, retry_backoff=4
    )
    run = _run_for(job)
    ids = [run.pk]
    for attempt in (1, 2, 3):
        before = timezone.now()
        execute_run(ids[-1], task_id="t", node="n")
        current = JobRun.objects.get(pk=ids[-1])
        assert current.attempt == attempt
        if attempt < 3:
            assert current.status == RunStatus.FAILED
            retry = JobRun.objects.get(retry_of=current)
            assert (retry.trigger, retry.attempt, retry.status) == (
                "retry",
                attempt + 1,
                "scheduled",
            )
            delay = (retry.scheduled_for - before).total_seconds()
            base = 4 * 2 ** (attempt - 1)
            assert base / 2 - 0.5 <= delay <= base + 1, "exponential backoff with jitter"
            assert published[-1] == (retry.pk, retry.scheduled_for)  # published for its time
            ids.append(retry.pk)
        else:
            assert current.status == RunStatus.SUCCEEDED
            assert not JobRun.objects.filter(retry_of=current).exists()
    assert len(log.read_text().splitlines()) == 3
    assert len(published) == 2


def test_every_attempt_of_a_run_has_the_same_idempotency_key(
    make_job: Callable[..., Job], tmp_path: Path, published: Published
) -> None:
    log = tmp_path / "log"
    job = make_job(task="tests.keyed", kwargs={"log": str(log), "failures": 2}, max_retries=3)
    first, other = _run_for(job), _run_for(job)
    ids = [first.pk]
    for _ in range(3):
        execute_run(ids[-1], task_id="t", node="n")
        retry = JobRun.objects.filter(retry_of_id=ids[-1]).first()
        if retry is not None:
            ids.append(retry.pk)
    execute_run(other.pk, task_id="t", node="n")
    lines = [line.split() for line in log.read_text().splitlines()]
    assert [attempt for attempt, _ in lines] == ["1", "2", "3", "1"]
    keys = [key for _, key in lines]
    assert keys[:3] == [f"{job.name}:run-{first.pk}"] * 3, "one key for the three attempts"
    assert keys[3] == f"{job.name}:run-{other.pk}", "another run, another key"


def test_retries_stop_at_max_retries(
    make_job: Callable[..., Job], tmp_path: Path, published: Published
) -> None:
    job = make_job(
        task="tests.flaky", kwargs={"log": str(tmp_path / "l"), "failures": 9}, max_retries=1
    )
    run = _run_for(job)
    execute_run(run.pk, task_id="t", node="n")
    retry = JobRun.objects.get(retry_of=run)
    execute_run(retry.pk, task_id="t", node="n")
    retry.refresh_from_db()
    assert retry.status == RunStatus.FAILED
    assert not JobRun.objects.filter(retry_of=retry).exists()
    assert JobRun.objects.count() == 2


def test_no_retry_by_default(make_job: Callable[..., Job], published: Published) -> None:
    run = _run_for(make_job(task="tests.fail"))
    execute_run(run.pk, task_id="t", node="n")
    assert JobRun.objects.count() == 1 and published == []


# --- time limits ------------------------------------------------------------------------------


@pytest.mark.parametrize("overlap", ["skip", "allow"])
def test_the_soft_time_limit_sets_stopping_and_is_recorded(
    make_job: Callable[..., Job], published: Published, overlap: str
) -> None:
    job = make_job(task="tests.wait_for_stop", soft_time_limit=1, max_retries=3, overlap=overlap)
    run = _run_for(job)
    started = time.monotonic()
    execute_run(run.pk, task_id="t", node="n")
    assert time.monotonic() - started < 10
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error == "soft time limit of 1 s reached: ctx.stopping was set"
    assert run.result == "stopped"  # the function saw ctx.stopping and returned
    assert published == []  # a time limit is not an exception: no retry


# --- minimum hold -----------------------------------------------------------------------------


def test_min_hold_keeps_the_lease_after_a_fast_run(
    make_job: Callable[..., Job], tmp_path: Path
) -> None:
    job = make_job(kwargs={"log": str(tmp_path / "log")})
    Job.objects.filter(pk=job.pk).update(min_hold=2)  # not (yet) a policy flag of @job/admin
    first = _run_for(job)
    execute_run(first.pk, task_id="t", node="n")
    first.refresh_from_db()
    assert first.status == RunStatus.SUCCEEDED
    held = Lease.objects.get(key=job.lock_key)
    assert held.expires_at == held.acquired_at + timedelta(seconds=2)
    second = _run_for(job)
    execute_run(second.pk, task_id="t", node="n")
    second.refresh_from_db()
    assert second.status == RunStatus.SKIPPED
    _wait_for(lambda: lease.current_holder(job.lock_key) is None, 10, "the hold to end")
    third = _run_for(job)
    execute_run(third.pk, task_id="t", node="n")
    third.refresh_from_db()
    assert third.status == RunStatus.SUCCEEDED and third.fencing_token == 2
