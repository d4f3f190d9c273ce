"""What a run's end sets going (jobs.guard.after_finish): the hooks the features registered run
for every ended run, by name; one that fails is logged and the others still run."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

from jobs.guard import after_finish
from jobs.guard.run_records import Claim
from jobs.models import Job, RunStatus

CLAIM = Claim(
    run_id=5, job_id=3, scheduled_for=datetime(2026, 11, 23, tzinfo=UTC), attempt=1,
    status=RunStatus.RUNNING, job=Job(pk=3, name="report"),
)  # fmt: skip


@pytest.fixture(autouse=True)
def no_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The features' own hooks (backfill, dependencies) set aside for the test."""
    monkeypatch.setattr(after_finish, "_hooks", {})


def test_every_registered_hook_hears_of_each_end_and_a_name_registered_again_replaces() -> None:
    heard: list[tuple[str, int]] = []
    after_finish.register("first", lambda claim: heard.append(("first", claim.run_id)))
    after_finish.register("second", lambda claim: heard.append(("second", claim.run_id)))
    after_finish.register("first", lambda claim: heard.append(("first again", claim.run_id)))
    after_finish.run_ended(CLAIM)
    assert heard == [("first again", 5), ("second", 5)]


def test_a_failing_hook_is_logged_and_the_next_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    heard: list[int] = []

    def broken(claim: Claim) -> None:
        raise ConnectionError("database gone")

    after_finish.register("downstream runs", broken)
    after_finish.register("next backfill run", lambda claim: heard.append(claim.run_id))
    with caplog.at_level(logging.ERROR, logger="jobs.guard.after_finish"):
        after_finish.run_ended(CLAIM)
    assert heard == [5]
    (record,) = caplog.records
    assert record.getMessage() == "downstream runs failed; maintenance will"
    assert record.job == "report" and record.exc_info is not None  # type: ignore[attr-defined]
