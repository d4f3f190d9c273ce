"""Dependencies against real PostgreSQL: a job gets one run per slot for which all its upstreams
succeeded, made in the transaction that ended the last of them (whichever way it ended); a failed,
lost, missed or skipped upstream that is not retried leaves a skipped record on the downstream
side instead; cycles and unknown upstreams are refused, naming the field."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from jobs import services
from jobs.audit import Actor
from jobs.beat import slot_records
from jobs.guard import run_records
from jobs.models import Job, JobKind, JobRun, RunStatus, Trigger
from jobs.schedule.kinds import Triggered
from jobs.web import tokens
from jobs.workflow import dependencies
from tests.integration.conftest import Published

pytestmark = pytest.mark.django_db(transaction=True)

ACTOR = Actor.code("tests")


def _triggered(make_job: Callable[..., Job], name: str, after: list[str]) -> Job:
    job = make_job(name, schedule=Triggered())
    return services.save_job(job, Triggered(), actor=ACTOR, after=after)


def _scheduled_run(job: Job, minutes_ago: float = 1) -> JobRun:
    slot = (timezone.now() - timedelta(minutes=minutes_ago)).replace(microsecond=0)
    (new,) = slot_records.insert_scheduled([(job.pk, slot)])
    return JobRun.objects.get(pk=new.run_id)


def _end(run: JobRun, status: RunStatus, retry_delay: float | None = None) -> run_records.Finished:
    claim = run_records.claim(run.pk, node="n", pid=1, task_id=f"t{run.pk}", holder=f"h{run.pk}")
    assert claim is not None and claim.lease is not None, claim
    return run_records.finish_fenced(
        run.pk,
        key=claim.lease.key,
        token=claim.lease.token,
        status=status,
        error="" if status == RunStatus.SUCCEEDED else "boom",
        retry_delay=retry_delay,
    )


def _downstream(job: Job) -> list[tuple[object, str, str, int | None]]:
    return list(
        JobRun.objects.filter(job=job, trigger=Trigger.UPSTREAM)
        .order_by("scheduled_for")
        .values_list("scheduled_for", "status", "error", "upstream_run_id")
    )


def test_an_upstream_success_makes_one_run_of_each_downstream_for_its_slot(
    make_job: Callable[..., Job], published: Published
) -> None:
    a = make_job("a")
    b = _triggered(make_job, "b", ["a"])
    c = _triggered(make_job, "c", ["a"])
    run = _scheduled_run(a)
    _end(run, RunStatus.SUCCEEDED)
    for job in (b, c):
        assert _downstream(job) == [(run.scheduled_for, RunStatus.SCHEDULED, "", run.pk)]
    assert dependencies.publish_runs_made_by(run.pk) == 2
    assert dependencies.publish_runs_made_by(run.pk) == 0  # once, whoever asks
    assert len(published) == 2
    # The same slot's run ending again (a repeated finish) makes nothing more.
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)
    assert len(_downstream(b)) == 1


def test_a_retried_failure_waits_for_its_retry_which_makes_the_run_for_the_first_slot(
    make_job: Callable[..., Job],
) -> None:
    a = make_job("a", max_retries=1)
    b = _triggered(make_job, "b", ["a"])
    run = _scheduled_run(a)
    finished = _end(run, RunStatus.FAILED, retry_delay=0)
    assert finished.retry is not None and _downstream(b) == []
    _end(JobRun.objects.get(pk=finished.retry.run_id), RunStatus.SUCCEEDED)
    assert _downstream(b) == [(run.scheduled_for, RunStatus.SCHEDULED, "", finished.retry.run_id)]


def test_a_final_failure_leaves_a_skipped_record_down_the_whole_chain(
    make_job: Callable[..., Job],
) -> None:
    a = make_job("a")
    b = _triggered(make_job, "b", ["a"])
    c = _triggered(make_job, "c", ["b"])
    run = _scheduled_run(a)
    _end(run, RunStatus.FAILED)
    [(slot, status, error, upstream)] = _downstream(b)
    assert (slot, status, upstream) == (run.scheduled_for, RunStatus.SKIPPED, run.pk)
    assert error == f"upstream a run {run.pk} failed: boom"
    [(_, status, error, _)] = _downstream(c)
    assert status == RunStatus.SKIPPED and error.startswith("upstream b run ")


def test_a_join_runs_once_when_every_upstream_succeeded_for_the_slot(
    make_job: Callable[..., Job],
) -> None:
    a, b = make_job("a"), make_job("b")
    both = _triggered(make_job, "both", ["a", "b"])
    slot_run_a = _scheduled_run(a)
    _end(slot_run_a, RunStatus.SUCCEEDED)
    assert _downstream(both) == []  # b has not run for that slot yet
    (new,) = slot_records.insert_scheduled([(b.pk, slot_run_a.scheduled_for)])
    _end(JobRun.objects.get(pk=new.run_id), RunStatus.SUCCEEDED)
    assert [row[:2] for row in _downstream(both)] == [
        (slot_run_a.scheduled_for, RunStatus.SCHEDULED)
    ]
    # Another slot of a alone makes nothing.
    _end(_scheduled_run(a, minutes_ago=3), RunStatus.SUCCEEDED)
    assert len(_downstream(both)) == 1


def test_a_missed_slot_and_a_skipped_one_leave_records_too(make_job: Callable[..., Job]) -> None:
    a = make_job("a")
    b = _triggered(make_job, "b", ["a"])
    slot = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    slot_records.insert_missed([(a.pk, slot, "every beat was down")])
    [(_, status, error, _)] = _downstream(b)
    assert status == RunStatus.SKIPPED and "missed: every beat was down" in error


def test_a_downstream_run_s_deadline_counts_from_when_it_was_made(
    make_job: Callable[..., Job],
) -> None:
    a = make_job("a", start_deadline=3600)
    b = _triggered(make_job, "b", ["a"])
    b.start_deadline = 60
    services.save_job(b, Triggered(), actor=ACTOR)
    run = _scheduled_run(a, minutes_ago=30)  # the upstream's slot is long past b's deadline
    _end(run, RunStatus.SUCCEEDED)
    made = JobRun.objects.get(job=b)
    claim = run_records.claim(made.pk, node="n", pid=1, task_id="t", holder="h")
    assert claim is not None and claim.status == RunStatus.RUNNING
    assert claim.upstream_run_id == run.pk and claim.scheduled_for == run.scheduled_for


@pytest.mark.parametrize(
    ("upstreams", "problem"),
    [(["nope"], "no job named 'nope'"), (["b"], "cannot run after itself")],
)
def test_an_unknown_upstream_or_itself_is_refused(
    make_job: Callable[..., Job], upstreams: list[str], problem: str
) -> None:
    b = make_job("b")
    with pytest.raises(ValidationError) as info:
        services.save_job(b, Triggered(), actor=ACTOR, after=upstreams)
    assert any(problem in message for message in info.value.message_dict["after"])


def test_a_cycle_is_refused_naming_it(make_job: Callable[..., Job]) -> None:
    make_job("a")
    _triggered(make_job, "b", ["a"])
    _triggered(make_job, "c", ["b"])
    a = Job.objects.get(name="a")
    with pytest.raises(ValidationError) as info:
        services.save_job(a, services.definition_of(a), actor=ACTOR, after=["c"])
    assert info.value.message_dict["after"] == ["that would make a cycle: a → b → c → a"]
    assert list(a.upstreams.all()) == []


def test_cli_adds_a_triggered_job_after_others_and_api_patches_them(
    make_job: Callable[..., Job],
) -> None:
    make_job("import")
    make_job("export")
    call_command(
        "jobs", "add", "report", "--task", "tests.record", "--triggered", "--after",
        "import,export", "--kwargs", '{"log": "-"}', stdout=io.StringIO(),
    )  # fmt: skip
    report = Job.objects.get(name="report")
    assert report.kind == JobKind.TRIGGERED and report.periodic_task is None
    out = io.StringIO()
    call_command("jobs", "show", "report", "--json", stdout=out)
    record = json.loads(out.getvalue())
    assert record["after"] == ["export", "import"] and record["schedule"].startswith("when trig")
    secret = tokens.create("tests", actor=ACTOR)[1]
    api = Client(headers={"authorization": f"Bearer {secret}"})
    patched = api.patch("/api/jobs/report", {"after": ["import"]}, content_type="application/json")
    assert patched.status_code == 200 and patched.json()["after"] == ["import"]
    assert api.get("/api/jobs/import").json()["before"] == ["report"]
    cycle = api.patch("/api/jobs/import", {"after": ["report"]}, content_type="application/json")
    assert cycle.status_code == 400 and "cycle" in cycle.json()["fields"]["after"][0]
    twice = api.patch(
        "/api/jobs/report", {"after": ["import", "import"]}, content_type="application/json"
    )
    assert twice.status_code == 400 and "at most once" in twice.json()["fields"]["after"][0]
    assert api.get("/api/jobs/report").json()["after"] == ["import"]
    assert Job.objects.get(name="report").kind == JobKind.TRIGGERED  # a patch keeps the kind


def test_cli_after_shows_sets_and_clears_a_job_s_upstreams(make_job: Callable[..., Job]) -> None:
    make_job("import")
    make_job("report")

    def after(*args: str) -> str:
        out = io.StringIO()
        call_command("jobs", "after", "report", *args, stdout=out, stderr=io.StringIO())
        return out.getvalue().strip()

    assert after() == "report runs after: no job"
    assert after("--set", "import") == "report runs after: import"
    with pytest.raises(CommandError) as info:
        after("--set", "report")
    assert "--set" in str(info.value) and "itself" in str(info.value)
    assert after("--clear") == "report runs after: no job"
