"""The rules that carry guarantees 2 and 3 where they exist in two copies: the lease rules of
``jobs.guard.lease`` (and where a run's start deadline counts from) repeated in the database's
functions (``jobs/sql/``, which test_sql_contract holds the migrated database to), and the retry
rule, written as a CTE and inside ``jobs_finish_run`` (driven through the same cases). Either
test fails when a copy drifts."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from jobs.guard import lease, run_records
from jobs.models import Job, JobRun, RunStatus, Trigger

pytestmark = pytest.mark.django_db

SQL = Path(run_records.__file__).parent.parent / "sql"

# The functions' names for what the Python statements pass as parameters.
PLPGSQL_PARAMETERS = {"%(min_hold)s": "p_min_hold"}


def _normalized(sql: str) -> str:
    sql = re.sub(r"--[^\n]*", "", sql)  # comments
    for placeholder, parameter in PLPGSQL_PARAMETERS.items():
        sql = sql.replace(placeholder, parameter)
    sql = re.sub(r"\bl\.", "jobs_lease.", sql)  # the functions alias the lease table as l
    return " ".join(sql.lower().split())


def _copies(rule: str, opening: int) -> list[str]:
    """Each place in jobs/sql/ where a statement opens as ``rule`` does (its first ``opening``
    characters, normalized), with as much text after it as the rule has: a copy that drifted
    shows, however it still starts."""
    written = _normalized("\n".join(p.read_text(encoding="utf-8") for p in SQL.glob("*.sql")))
    rule = _normalized(rule)
    starts = [m.start() for m in re.finditer(re.escape(rule[:opening]), written)]
    return [written[start : start + len(rule)] for start in starts]


@pytest.mark.parametrize(
    ("rule", "opening"),
    [
        (lease.TAKE_OVER_IF_LAPSED_PG, len("on conflict (key)")),
        (lease.RELEASE_EXPIRY_PG, len("greatest(now(), jobs_lease.acquired_at")),
        (run_records.deadline_from_pg("r"), len("case when r.trigger = 'backfill' then r.")),
    ],
    ids=[
        "take over only a lapsed lease, token + 1",
        "release honours min_hold",
        "a backfill run's deadline counts from its release",
    ],
)
def test_the_sql_copy_of_each_rule_is_the_python_one_and_written_once(
    rule: str, opening: int
) -> None:
    assert _copies(rule, opening) == [_normalized(rule)], (
        "jobs/sql/ should apply the rule of jobs.guard in one place, as written there; change "
        "both together (and jobs/sql/ with a migration, jobs/sql/README.md)"
    )


def test_the_functions_ask_whether_a_lease_is_live_as_the_python_statements_do() -> None:
    """'The lease is live' is one rule (``lease.lease_live_pg``); the functions spell it out,
    so each of their lease-expiry comparisons (not an assignment) is that rule, or the
    take-over's lapsed test (its negation, held to ``TAKE_OVER_IF_LAPSED_PG`` above)."""
    written = _normalized("\n".join(p.read_text(encoding="utf-8") for p in SQL.glob("*.sql")))
    comparisons = re.findall(r"[\w.]*expires_at\s*(?:>=|<=|>|<)\s*now\(\)", written)
    live = _normalized(lease.lease_live_pg("l"))
    lapsed = _normalized("jobs_lease.expires_at <= now()")
    assert comparisons, "the functions of jobs/sql/ no longer test a lease's expiry?"
    assert set(comparisons) <= {live, lapsed}, comparisons


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
