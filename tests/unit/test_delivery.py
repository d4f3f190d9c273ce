"""How the Celery task of a run reports each recorded outcome (jobs.guard.delivery), so Flower shows
the run as recorded."""

from __future__ import annotations

import pytest
from celery.exceptions import Ignore

from jobs.exceptions import RunFailed, RunLost
from jobs.guard.delivery import Delivery, report
from jobs.models import RunStatus


def test_a_failed_run_raises_with_the_jobs_exception_as_its_cause() -> None:
    cause = ValueError("boom")
    with pytest.raises(RunFailed, match=r"^ValueError: boom$") as raised:
        report(Delivery(7, RunStatus.FAILED, reason="ValueError: boom", cause=cause))
    assert raised.value.__cause__ is cause


def test_a_failure_without_an_exception_still_raises() -> None:
    reason = "soft time limit of 5 s reached: ctx.stopping was set"
    with pytest.raises(RunFailed, match="soft time limit") as raised:
        report(Delivery(7, RunStatus.FAILED, reason=reason))
    assert raised.value.__cause__ is None


def test_a_lost_run_raises_run_lost() -> None:
    with pytest.raises(RunLost, match=r"lease job:x .* lapsed"):
        report(Delivery(7, RunStatus.LOST, reason="lease job:x (token 3) lapsed"))


def test_a_succeeded_run_returns_its_status_and_the_jobs_value() -> None:
    returned = report(Delivery(7, RunStatus.SUCCEEDED, result='{"rows": 3}'))
    assert returned == {"status": "succeeded", "result": {"rows": 3}}
    assert report(Delivery(7, RunStatus.SUCCEEDED)) == {"status": "succeeded", "result": None}


@pytest.mark.parametrize(
    "status", [RunStatus.SKIPPED, RunStatus.MISSED, RunStatus.CANCELLED, RunStatus.SCHEDULED]
)
def test_a_run_that_did_not_run_returns_its_status_and_why(status: RunStatus) -> None:
    returned = report(Delivery(7, status, reason="lease job:x held by w@h:1:run-6 (token 2)"))
    assert returned == {"status": status, "reason": "lease job:x held by w@h:1:run-6 (token 2)"}


def test_a_duplicate_delivery_reports_nothing() -> None:
    with pytest.raises(Ignore):
        report(Delivery(7, RunStatus.FAILED, duplicate=True))
