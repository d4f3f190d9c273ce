"""A claim or finish whose connection broke (jobs.guard.reconnect), against real PostgreSQL.

The cut is simulated here (the statement commits, then the call raises as a broken connection
does, or it raises before reaching the server); tests/acceptance/test_connection_cuts.py cuts a
real worker's connection with a proxy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError
from django.utils import timezone

from jobs.guard import lease, reconnect, run_records
from jobs.guard.runner import execute_run
from jobs.models import Job, JobRun, RunStatus, Trigger

pytestmark = pytest.mark.django_db(transaction=True)

CUT = "server closed the connection unexpectedly"


def _run(job: Job) -> JobRun:
    return JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.MANUAL)


def _executions(tmp_path: Path) -> list[str]:
    log = tmp_path / "executions.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture(autouse=True)
def short_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reconnect, "FIRST_PAUSE_SECONDS", 0.01)


def _cut_once(monkeypatch: pytest.MonkeyPatch, name: str, *, committed: bool) -> Callable[[], int]:
    """Make the first call of ``run_records.<name>`` fail as a cut connection does, after
    (``committed``) or instead of reaching the database; how many calls were made."""
    real = getattr(run_records, name)
    calls = 0

    def cut(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls > 1:
            return real(*args, **kwargs)
        if committed:
            real(*args, **kwargs)
        raise OperationalError(CUT)

    monkeypatch.setattr(run_records, name, cut)
    return lambda: calls


def _read_back_an_hour_late(
    monkeypatch: pytest.MonkeyPatch, name: str, sent: str, lease_of: Callable[[Any], Any]
) -> None:
    """Make ``run_records.<name>`` read back as if the cut statement (sent at ``sent``) went out
    an hour ago: the lease it returns has passed its local deadline."""
    real = getattr(run_records, name)

    def read_back_late(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **{**kwargs, sent: time.monotonic() - 3600})
        assert found is not None and lease_of(found) is not None
        assert not lease_of(found).locally_valid
        return found

    monkeypatch.setattr(run_records, name, read_back_late)


def _assert_ran_once(run: JobRun, tmp_path: Path) -> None:
    delivery = execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert (delivery.status, run.status) == (RunStatus.SUCCEEDED, RunStatus.SUCCEEDED), run.error
    assert len(_executions(tmp_path)) == 1


def _claimed(job: Job, **who: Any) -> tuple[JobRun, run_records.Claim]:
    run = _run(job)
    made = run_records.claim(run.pk, **{"node": "n", "pid": 1, "task_id": "t", **who})
    assert made is not None
    return run, made


def test_a_claim_reads_back_as_the_delivery_that_made_it(make_job: Callable[..., Job]) -> None:
    run, made = _claimed(make_job(), holder="n:1:run")
    again = run_records.reclaim(
        run.pk, node="n", pid=1, task_id="t", holder="n:1:run", claimed_at=time.monotonic()
    )
    assert again is not None and made.lease is not None and again.lease is not None
    assert (again.status, again.job.name, again.attempt) == (RunStatus.RUNNING, "j", 1)
    assert (again.lease.key, again.lease.token) == (made.lease.key, made.lease.token)


@pytest.mark.parametrize(
    "who",
    [
        {"node": "other"},
        {"pid": 2},
        {"task_id": "a redelivery"},
        {"holder": "n:1:another-run"},
    ],
)
def test_a_claim_does_not_read_back_as_another_delivery(
    make_job: Callable[..., Job], who: dict[str, Any]
) -> None:
    run, _ = _claimed(make_job(), holder="n:1:run")
    asked = {"node": "n", "pid": 1, "task_id": "t", "holder": "n:1:run", **who}
    assert run_records.reclaim(run.pk, claimed_at=time.monotonic(), **asked) is None


def test_no_claim_reads_back_for_a_scheduled_run_or_a_lapsed_lease(
    make_job: Callable[..., Job],
) -> None:
    job = make_job()
    scheduled = _run(job)
    who: dict[str, Any] = {"node": "n", "pid": 1, "task_id": "t", "holder": "n:1:run"}
    assert run_records.reclaim(scheduled.pk, claimed_at=0.0, **who) is None
    run, _ = _claimed(job, holder="n:1:run")
    assert lease.force_release(job.lock_key)
    assert run_records.reclaim(run.pk, claimed_at=0.0, **who) is None


def test_a_claim_cut_after_its_commit_runs_the_run_once(
    make_job: Callable[..., Job], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    run = _run(make_job())
    calls = _cut_once(monkeypatch, "claim", committed=True)
    delivery = execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert (delivery.status, run.status) == (RunStatus.SUCCEEDED, RunStatus.SUCCEEDED)
    assert len(_executions(tmp_path)) == 1
    assert calls() == 1  # read back: no second claim was needed


def test_a_claim_read_back_late_runs_on_a_renewed_lease(
    make_job: Callable[..., Job], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The reconnect took most of the lease's ttl (here: its local deadline already passed):
    the lease is renewed before the run starts, or the run would count as lost."""
    run = _run(make_job())
    _cut_once(monkeypatch, "claim", committed=True)
    _read_back_an_hour_late(monkeypatch, "reclaim", "claimed_at", lambda made: made.lease)
    _assert_ran_once(run, tmp_path)


def test_a_claim_read_back_after_its_lease_lapsed_does_not_run(
    make_job: Callable[..., Job], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    job = make_job()
    run = _run(job)
    real = run_records.claim

    def cut_and_lapse(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(run_records, "claim", real)
        made = real(*args, **kwargs)
        assert made is not None and made.lease is not None
        lease.force_release(job.lock_key)  # lapsed (or taken over) while the worker was away
        raise OperationalError(CUT)

    monkeypatch.setattr(run_records, "claim", cut_and_lapse)
    delivery = execute_run(run.pk, task_id="t", node="n")
    assert delivery.duplicate and _executions(tmp_path) == []


def test_a_claim_cut_before_the_database_claims_afresh(
    make_job: Callable[..., Job], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    run = _run(make_job())
    calls = _cut_once(monkeypatch, "claim", committed=False)
    delivery = execute_run(run.pk, task_id="t", node="n")
    assert delivery.status == RunStatus.SUCCEEDED
    assert len(_executions(tmp_path)) == 1 and calls() == 2


def test_a_second_delivery_in_the_same_process_never_reads_a_cut_claim_back(
    make_job: Callable[..., Job], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    run = _run(make_job())
    _cut_once(monkeypatch, "claim", committed=True)
    with reconnect.delivering(run.pk) as alone:  # the first delivery, still being handled
        assert alone
        delivery = execute_run(run.pk, task_id="t", node="n")
    assert delivery.duplicate and _executions(tmp_path) == []


@pytest.mark.parametrize("committed", [False, True], ids=["before", "after its commit"])
@pytest.mark.parametrize("overlap", ["skip", "allow"])
def test_a_cut_finish_records_the_outcome_once(
    make_job: Callable[..., Job],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    committed: bool,
    overlap: str,
) -> None:
    run = _run(make_job(overlap=overlap))
    name = "finish_fenced" if overlap == "skip" else "finish_unleased"
    _cut_once(monkeypatch, name, committed=committed)
    delivery = execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert (delivery.status, run.status) == (RunStatus.SUCCEEDED, RunStatus.SUCCEEDED)
    assert delivery.reason == "" and run.error == ""
    assert len(_executions(tmp_path)) == 1
    if overlap == "skip":
        assert lease.current_holder("job:j") is None  # given back


@pytest.mark.parametrize("committed", [False, True], ids=["before", "after its commit"])
def test_a_cut_lease_try_of_a_claimed_run_runs_it_once(
    make_job: Callable[..., Job], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, committed: bool
) -> None:
    """A key derived from arguments is taken after the claim (run_records.acquire_for_run)."""
    log = tmp_path / "executions.log"
    run = _run(make_job(task="tests.by_city", kwargs={"log": str(log), "city": "Oslo"}))
    calls = _cut_once(monkeypatch, "acquire_for_run", committed=committed)
    delivery = execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert (delivery.status, run.status) == (RunStatus.SUCCEEDED, RunStatus.SUCCEEDED)
    assert run.lease_key == "city:Oslo" and run.fencing_token == 1
    assert len(_executions(tmp_path)) == 1
    assert calls() == (1 if committed else 2)  # read back, or tried again
    assert lease.current_holder("city:Oslo") is None


def test_a_duplicate_whose_count_is_cut_stays_a_duplicate(
    make_job: Callable[..., Job], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    run, _ = _claimed(make_job(), holder="n:1:run")
    _cut_once(monkeypatch, "count_duplicate", committed=False)
    delivery = execute_run(run.pk, task_id="t", node="other")
    assert delivery.duplicate and _executions(tmp_path) == []


def test_a_lease_read_back_late_runs_on_a_renewed_lease(
    make_job: Callable[..., Job], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log = tmp_path / "executions.log"
    run = _run(make_job(task="tests.by_city", kwargs={"log": str(log), "city": "Oslo"}))
    _cut_once(monkeypatch, "acquire_for_run", committed=True)
    _read_back_an_hour_late(monkeypatch, "lease_taken_for_run", "sent_at", lambda taken: taken)
    _assert_ran_once(run, tmp_path)


def test_a_database_out_for_longer_than_the_window_fails_the_delivery(
    make_job: Callable[..., Job], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    run = _run(make_job())
    monkeypatch.setattr(reconnect, "RECONNECT_WINDOW_SECONDS", 0.05)

    def unreachable(*_: Any, **__: Any) -> Any:
        raise OperationalError(CUT)

    monkeypatch.setattr(run_records, "claim", unreachable)
    monkeypatch.setattr(run_records, "reclaim", unreachable)
    with pytest.raises(OperationalError):
        execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert run.status == RunStatus.SCHEDULED and _executions(tmp_path) == []


@pytest.fixture(autouse=True)
def no_leftover_deliveries() -> Iterator[None]:
    yield
    assert not reconnect._delivering, "a delivery stayed registered"
