"""The rules that carry guarantees 2 and 3 where they exist in two copies: the lease rules of
``jobs.guard.lease`` repeated, for speed, inside the guarded run's PL/pgSQL functions (read here
as the database holds them now), and the retry rule, written as a CTE and inside
``jobs_finish_run`` (driven through the same cases). Either test fails when a copy drifts."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from jobs.guard import lease, run_records
from jobs.models import Job, JobRun, RunStatus, Trigger

pytestmark = pytest.mark.django_db

# The functions' names for what the Python statements pass as parameters.
PLPGSQL_PARAMETERS = {"%(min_hold)s": "p_min_hold"}


def _installed(function: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_functiondef(%s::regproc)", [function])
        definition: str = cursor.fetchone()[0]
    return definition


def _normalized(sql: str) -> str:
    for placeholder, parameter in PLPGSQL_PARAMETERS.items():
        sql = sql.replace(placeholder, parameter)
    sql = re.sub(r"\bl\.", "jobs_lease.", sql)  # the functions alias the lease table as l
    return " ".join(sql.lower().split())


@pytest.mark.parametrize(
    ("rule", "function"),
    [
        (lease.TAKE_OVER_IF_LAPSED_PG, "jobs_claim_run"),
        (lease.RELEASE_EXPIRY_PG, "jobs_finish_run"),
        (run_records.deadline_from_pg("r"), "jobs_claim_run"),
    ],
    ids=[
        "take over only a lapsed lease, token + 1",
        "release honours min_hold",
        "a backfill run's deadline counts from its release",
    ],
)
def test_the_plpgsql_copy_of_each_lease_rule_matches_the_python_one(
    rule: str, function: str
) -> None:
    assert _normalized(rule) in _normalized(_installed(function)), (
        f"{function} no longer applies the rule of jobs.lease; change both together "
        "(a new migration with CREATE OR REPLACE FUNCTION)"
    )


# --- the retry rule: written as a CTE (jobs.guard.run_records._RETRY_CTE, for unleased finishes
# and lost runs) and inside jobs_finish_run (the fenced finish). Both are driven through the same
# cases here, and must record the same retry, or none.

RETRY_CASES = {
    "failed, retries left": ("failed", 5.0, "abandon", False),
    "failed, none left": ("failed", None, "abandon", False),
    "succeeded": ("succeeded", 5.0, "abandon", False),
    "lost, on_lost=retry": ("lost", None, "retry", False),
    "lost again after a lost run's retry": ("lost", None, "retry", True),
    "lost, on_lost=abandon": ("lost", None, "abandon", False),
}


def _retry_recorded(
    make_job: Callable[..., Job],
    *,
    fenced: bool,
    status: str,
    delay: float | None,
    on_lost: str,
    retry_of_lost: bool,
) -> tuple[Any, ...] | None:
    name = f"retry-{'fenced' if fenced else 'unleased'}"
    job = make_job(name=name, on_lost=on_lost, overlap="skip" if fenced else "allow")
    earlier = None
    if retry_of_lost:
        earlier = JobRun.objects.create(
            job=job, scheduled_for=timezone.now(), trigger=Trigger.MANUAL, status=RunStatus.LOST
        )
    run = JobRun.objects.create(
        job=job,
        scheduled_for=timezone.now(),
        trigger=Trigger.RETRY if earlier else Trigger.MANUAL,
        attempt=2 if earlier else 1,
        retry_of=earlier,
        args=[1],
        kwargs={"a": 1},
    )
    claim = run_records.claim(run.pk, node="n", pid=1, task_id="t", holder=f"{name}:1")
    assert claim is not None and (claim.lease is not None) == fenced
    # The database's now(), which both statements add the delay to: in the test's transaction
    # it is the transaction's start, which a loaded machine may leave well behind the clock.
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        (before,) = cursor.fetchone()
    if fenced:
        assert claim.lease is not None
        finished = run_records.finish_fenced(
            run.pk,
            key=claim.lease.key,
            token=claim.lease.token,
            status=RunStatus(status),
            retry_delay=delay,
        )
    else:
        finished = run_records.finish_unleased(run.pk, status=RunStatus(status), retry_delay=delay)
    assert finished.status == status
    retry = JobRun.objects.filter(retry_of=run).first()
    if retry is None:
        assert finished.retry is None
        return None
    assert finished.retry is not None and finished.retry.run_id == retry.pk
    delay_seconds = round((retry.scheduled_for - before).total_seconds())
    return (retry.trigger, retry.attempt - run.attempt, retry.args, retry.kwargs, delay_seconds)


@pytest.mark.parametrize("case", list(RETRY_CASES), ids=list(RETRY_CASES))
def test_the_fenced_finish_and_the_retry_cte_record_the_same_retry(
    make_job: Callable[..., Job], case: str
) -> None:
    status, delay, on_lost, retry_of_lost = RETRY_CASES[case]
    recorded = [
        _retry_recorded(
            make_job,
            fenced=fenced,
            status=status,
            delay=delay,
            on_lost=on_lost,
            retry_of_lost=retry_of_lost,
        )
        for fenced in (True, False)
    ]
    assert recorded[0] == recorded[1], (
        "jobs_finish_run and run_records._RETRY_CTE disagree; change both together"
    )
    expected_retry = case in ("failed, retries left", "lost, on_lost=retry")
    assert (recorded[0] is not None) == expected_retry
    if expected_retry:
        assert recorded[0] == ("retry", 1, [1], {"a": 1}, 5 if status == "failed" else 0)
