"""Rate limits against real PostgreSQL: at most rate_limit_runs starts of a job in any
rate_limit_period, counted at the claim with that many leases each held for the period; a run over
it is recorded skipped, saying when the next may start, and a run skipped for the job's own lease
does not use up the limit."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test import Client
from django.utils import timezone

from jobs.audit import Actor
from jobs.guard import run_records
from jobs.models import Job, JobRun, Lease, RunStatus, Trigger
from jobs.web import tokens

pytestmark = pytest.mark.django_db


def _claim(job: Job) -> run_records.Claim:
    run = JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.MANUAL)
    claim = run_records.claim(run.pk, node="n", pid=1, task_id=f"t{run.pk}", holder=f"h{run.pk}")
    assert claim is not None
    return claim


def _finish(claim: run_records.Claim) -> None:
    assert claim.lease is not None
    run_records.finish_fenced(
        claim.run_id, key=claim.lease.key, token=claim.lease.token, status=RunStatus.SUCCEEDED
    )


def _age_rate_leases(job: Job, seconds: float) -> None:
    """Move the job's rate leases ``seconds`` into the past, as if that much time went by."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE jobs_lease SET acquired_at = acquired_at - make_interval(secs => %s), "
            "expires_at = expires_at - make_interval(secs => %s) WHERE key LIKE %s",
            [seconds, seconds, f"rate:{job.name}#%"],
        )


def test_at_most_n_runs_start_per_period_the_next_is_skipped_saying_when(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("mailer", rate_limit_runs=2, rate_limit_period=60)
    for _ in range(2):
        claim = _claim(job)
        assert claim.status == RunStatus.RUNNING
        _finish(claim)  # ended at once: the limit counts starts, not runs at once
    over = _claim(job)
    assert over.status == RunStatus.SKIPPED
    assert over.error.startswith("rate limit: 2 run(s) per 60 s reached; the next may start at ")
    _age_rate_leases(job, 61)
    assert _claim(job).status == RunStatus.RUNNING


def test_a_run_skipped_for_the_job_s_lease_does_not_use_up_the_limit(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("mailer", rate_limit_runs=2, rate_limit_period=60)
    running = _claim(job)
    assert running.status == RunStatus.RUNNING
    skipped = _claim(job)  # the job's own lease is held: overlap skip
    assert skipped.status == RunStatus.SKIPPED and "lease job:mailer held" in skipped.error
    _finish(running)
    assert _claim(job).status == RunStatus.RUNNING  # the second of two, not over the limit


def test_a_missed_run_takes_no_rate_lease(make_job: Callable[..., Job]) -> None:
    job = make_job("mailer", rate_limit_runs=1, rate_limit_period=60, start_deadline=5)
    late = JobRun.objects.create(
        job=job, scheduled_for=timezone.now() - timedelta(minutes=5), trigger=Trigger.MANUAL
    )
    claim = run_records.claim(late.pk, node="n", pid=1, task_id="t", holder="h")
    assert claim is not None and claim.status == RunStatus.MISSED
    assert _claim(job).status == RunStatus.RUNNING


def test_ten_claims_within_the_period_start_only_the_limit(
    make_job: Callable[..., Job],
) -> None:
    # overlap allow: no job lease, so only the rate limit stands between the runs.
    job = make_job("mailer", rate_limit_runs=3, rate_limit_period=3600, overlap="allow")
    statuses = [_claim(job).status for _ in range(10)]
    assert statuses.count(RunStatus.RUNNING) == 3
    assert statuses.count(RunStatus.SKIPPED) == 7
    keys = Lease.objects.filter(key__startswith="rate:mailer#").values_list("key", flat=True)
    assert sorted(keys) == ["rate:mailer#1", "rate:mailer#2", "rate:mailer#3"]


@pytest.mark.parametrize(
    ("policies", "field"),
    [
        ({"rate_limit_runs": 2}, "rate_limit_period"),
        ({"rate_limit_period": 60}, "rate_limit_runs"),
        ({"rate_limit_runs": 0, "rate_limit_period": 60}, "rate_limit_runs"),
        ({"rate_limit_runs": 2, "rate_limit_period": 0}, "rate_limit_period"),
    ],
    ids=["no period", "no runs", "zero runs", "zero period"],
)
def test_a_half_or_empty_rate_limit_is_refused_naming_the_field(
    make_job: Callable[..., Job], policies: dict[str, int], field: str
) -> None:
    with pytest.raises(ValidationError) as info:
        make_job("mailer", **policies)
    assert field in info.value.message_dict


def test_the_api_sets_and_clears_a_rate_limit(make_job: Callable[..., Job]) -> None:
    make_job("mailer")
    secret = tokens.create("tests", actor=Actor.code("tests"))[1]
    api = Client(headers={"authorization": f"Bearer {secret}"})

    def patch(body: dict[str, object]) -> object:
        return api.patch("/api/jobs/mailer", body, content_type="application/json")

    done = patch({"rate_limit_runs": 5, "rate_limit_period": 60})
    assert done.status_code == 200  # type: ignore[attr-defined]
    assert Job.objects.get(name="mailer").rate_limit_runs == 5
    half = patch({"rate_limit_runs": None})
    assert half.status_code == 400  # type: ignore[attr-defined]
    assert "rate_limit_runs" in half.json()["fields"]  # type: ignore[attr-defined]
    cleared = patch({"rate_limit_runs": None, "rate_limit_period": None})
    assert cleared.status_code == 200  # type: ignore[attr-defined]
    assert Job.objects.get(name="mailer").rate_limit_runs is None
