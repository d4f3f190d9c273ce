"""What a job function receives about its run (jobs.context), against real PostgreSQL: the
idempotency key every attempt of a slot shares, the upstream's slot, and the fenced transaction
that commits only while the run holds its lease."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from jobs.context import JobContext, first_attempt
from jobs.exceptions import LeaseLost
from jobs.guard import lease
from jobs.models import Job, JobRun, Trigger
from tests.support.job_factory import new_run

pytestmark = pytest.mark.django_db

SLOT = datetime(2026, 11, 23, 22, 0, tzinfo=UTC)


def _ctx(run_id: int, **fields: object) -> JobContext:
    values: dict[str, object] = {
        "job_name": "report", "run_id": run_id, "scheduled_for": SLOT, "fencing_token": None,
        "attempt": 1, "lease_key": "job:report", **fields,
    }  # fmt: skip
    return JobContext(**values)  # type: ignore[arg-type]


def _retry_of(run: JobRun) -> JobRun:
    return JobRun.objects.create(
        job=run.job, scheduled_for=run.scheduled_for, trigger=Trigger.RETRY,
        attempt=run.attempt + 1, retry_of=run,
    )  # fmt: skip


def test_every_attempt_of_a_slot_shares_the_first_attempts_idempotency_key(
    make_job: Callable[..., Job],
) -> None:
    first = new_run(make_job())
    second = _retry_of(first)
    third = _retry_of(second)
    assert first_attempt(third.pk) == first_attempt(second.pk) == first.pk
    assert first_attempt(first.pk) == first.pk
    assert _ctx(first.pk).idempotency_key == f"report:run-{first.pk}"
    assert _ctx(third.pk, attempt=3).idempotency_key == f"report:run-{first.pk}"


def test_a_run_made_by_its_upstreams_has_their_slot() -> None:
    assert _ctx(1).upstream_slot is None
    assert _ctx(2, upstream_run_id=1).upstream_slot == SLOT


def test_a_fenced_transaction_commits_while_the_lease_is_held_and_raises_once_lost() -> None:
    held = lease.acquire("job:report", "n1:1:run-5", 30)
    assert held is not None
    ctx = _ctx(5, fencing_token=held.token)
    with ctx.fenced():
        Job.objects.none().exists()  # any work: the lease was verified first
    assert lease.force_release("job:report")
    assert lease.acquire("job:report", "usurper", 30) is not None
    with pytest.raises(LeaseLost), ctx.fenced():
        pytest.fail("the body must not run once the lease is someone else's")


def test_a_run_without_a_lease_has_nothing_to_fence() -> None:
    with pytest.raises(RuntimeError, match="holds no lease"), _ctx(5).fenced():
        pass
