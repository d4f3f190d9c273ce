"""Concurrency caps against real PostgreSQL: a job with max_concurrency N has N leases per lock
key; the claim (and the runner, for a key derived from arguments or under overlap wait) takes the
first free one, each holder fenced by its own token, and skips or waits only when all N are held."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from jobs import services
from jobs.audit import Actor
from jobs.guard import lease, policies, run_records
from jobs.guard.runner import execute_run
from jobs.models import Job, JobRun, RunStatus, Trigger
from jobs.web import tokens

pytestmark = pytest.mark.django_db
KWARGS = '{"log": "/dev/null"}'


def _run(job: Job) -> JobRun:
    return JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.MANUAL)


def _claim(run: JobRun) -> run_records.Claim:
    claim = run_records.claim(run.pk, node="n", pid=1, task_id=f"t{run.pk}", holder=f"h{run.pk}")
    assert claim is not None
    return claim


def test_the_claim_takes_the_first_free_of_n_leases_and_skips_only_when_all_are_held(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("export", max_concurrency=3)
    claims = [_claim(_run(job)) for _ in range(4)]
    held = [claim.lease for claim in claims[:3]]
    assert [h.key if h else None for h in held] == ["job:export#1", "job:export#2", "job:export#3"]
    assert all(h is not None and h.token == 1 for h in held)
    assert claims[3].status == RunStatus.SKIPPED
    assert claims[3].error == "all 3 leases of job:export held (max_concurrency 3)"
    # One ends: the next run takes the lease it gave back, with a higher token (fenced).
    second = held[1]
    assert second is not None
    run_records.finish_fenced(
        claims[1].run_id, key=second.key, token=second.token, status=RunStatus.SUCCEEDED
    )
    nxt = _claim(_run(job))
    assert nxt.lease is not None and (nxt.lease.key, nxt.lease.token) == ("job:export#2", 2)
    assert JobRun.objects.get(pk=nxt.run_id).lease_key == "job:export#2"


def test_a_key_derived_from_arguments_gets_n_leases_too(
    make_job: Callable[..., Job], tmp_path: Path
) -> None:
    job = make_job(
        "cities",
        task="tests.by_city",
        kwargs={"log": str(tmp_path / "log"), "city": "Paris"},
        max_concurrency=2,
    )
    for holder in ("other-1", "other-2"):
        taken = policies.take_lease(job, _claimed_without_lease(job).run_id, "city:Paris", holder)
        assert isinstance(taken, lease.HeldLease), taken
    third = policies.take_lease(job, _claimed_without_lease(job).run_id, "city:Paris", "h3")
    assert third == policies.Skip("all 2 leases of city:Paris held (max_concurrency 2)")


def _claimed_without_lease(job: Job) -> run_records.Claim:
    run = _run(job)
    claim = run_records.claim(
        run.pk, node="n", pid=1, task_id=f"t{run.pk}", holder=f"h{run.pk}", keyed_tasks=[job.task]
    )
    assert claim is not None and claim.lease is None
    return claim


def test_overlap_wait_takes_a_lease_as_soon_as_one_of_n_frees(
    make_job: Callable[..., Job], tmp_path: Path
) -> None:
    job = make_job(
        "waiting", kwargs={"log": str(tmp_path / "log")}, max_concurrency=2, overlap="wait"
    )
    first, second = (lease.acquire(key, "busy", 30) for key in lease.slot_keys("job:waiting", 2))
    assert first is not None and second is not None
    run = _run(job)
    claim = _claim(run)
    assert claim.status == RunStatus.RUNNING and claim.lease is None  # waits for one
    lease.release(second)
    taken = policies.take_lease(job, run.pk, "job:waiting", f"h{run.pk}")
    assert isinstance(taken, lease.HeldLease) and taken.key == "job:waiting#2"


def test_a_run_executes_under_one_of_the_n_leases_and_gives_it_back(
    make_job: Callable[..., Job], tmp_path: Path
) -> None:
    job = make_job("export", kwargs={"log": str(tmp_path / "log")}, max_concurrency=2)
    assert lease.acquire("job:export#1", "busy", 30) is not None
    run = _run(job)
    execute_run(run.pk, task_id="t", node="n")
    run.refresh_from_db()
    assert (run.status, run.lease_key, run.fencing_token) == (
        RunStatus.SUCCEEDED,
        "job:export#2",
        1,
    )


@pytest.mark.parametrize(
    ("policies_", "schedule_none"),
    [({"overlap": "allow"}, False), ({"overlap": "replace"}, False), ({}, True)],
    ids=["with allow", "with replace", "continuous"],
)
def test_a_cap_above_one_is_refused_where_it_cannot_hold_naming_the_field(
    make_job: Callable[..., Job], policies_: dict[str, str], schedule_none: bool
) -> None:
    extra = {"schedule": None} if schedule_none else {}
    with pytest.raises(ValidationError) as info:
        make_job("capped", max_concurrency=2, **policies_, **extra)
    assert "max_concurrency" in info.value.message_dict


def test_releasing_a_capped_job_s_lease_releases_each_held_one(
    make_job: Callable[..., Job],
) -> None:
    make_job("export", max_concurrency=3)
    for key in lease.slot_keys("job:export", 3)[:2]:
        assert lease.acquire(key, "busy", 30) is not None
    assert services.release_lease("export", actor=Actor.code("tests"))
    assert all(lease.acquire(key, "next", 30) for key in lease.slot_keys("job:export", 3))


def test_cli_and_api_set_the_cap_and_refuse_a_bad_one(make_job: Callable[..., Job]) -> None:
    make_job("export")
    out = io.StringIO()
    call_command(
        "jobs", "add", "capped", "--task", "tests.record", "--every", "1m", "--kwargs", KWARGS,
        "--max-concurrency", "4", stdout=out, stderr=io.StringIO(),
    )  # fmt: skip
    assert Job.objects.get(name="capped").max_concurrency == 4
    with pytest.raises(CommandError) as info:
        call_command(
            "jobs", "add", "bad", "--task", "tests.record", "--every", "1m", "--kwargs", KWARGS,
            "--max-concurrency", "2", "--overlap", "allow", stderr=io.StringIO(),
        )  # fmt: skip
    assert "--max-concurrency" in str(info.value)
    secret = tokens.create("tests", actor=Actor.code("tests"))[1]
    api = Client(headers={"authorization": f"Bearer {secret}"})
    patched = api.patch("/api/jobs/export", {"max_concurrency": 3}, content_type="application/json")
    assert patched.status_code == 200 and patched.json()["max_concurrency"] == 3
    refused = api.patch("/api/jobs/export", {"max_concurrency": 0}, content_type="application/json")
    assert refused.status_code == 400 and "max_concurrency" in refused.json()["fields"]
