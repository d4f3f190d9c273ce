"""Backfill (jobs.workflow.backfill) against real PostgreSQL: one run per slot that has none,
whoever else made the slot's run; released one at a time per job, oldest first; a start deadline
counted from the release; and the CLI's and the API's answers, errors naming the field."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from jobs import services
from jobs.audit import Actor
from jobs.beat import coalescing, slot_records
from jobs.exceptions import NotTriggerable
from jobs.guard import run_records
from jobs.models import AuditEntry, Job, JobRun, RunStatus, Trigger
from jobs.schedule import slots
from jobs.schedule.kinds import Cron, Every
from jobs.upkeep import sweeps
from jobs.web import tokens
from jobs.workflow import backfill

pytestmark = pytest.mark.django_db

MINUTELY = Every(60)
DAY = datetime(2026, 3, 1, tzinfo=UTC)


def backfill_runs(job: Job) -> list[JobRun]:
    return list(JobRun.objects.filter(job=job, trigger=Trigger.BACKFILL).order_by("scheduled_for"))


def fill(name: str, since: datetime, until: datetime, **options: Any) -> backfill.BackfillResult:
    return services.backfill_job(name, since, until, actor=Actor.code("tests"), **options)


def finish(run: JobRun, status: RunStatus = RunStatus.SUCCEEDED) -> None:
    JobRun.objects.filter(pk=run.pk).update(status=status)


# --- which runs it makes ------------------------------------------------------------------------


def test_it_makes_one_run_per_slot_in_the_range_both_ends_included(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("fill", schedule=MINUTELY)
    result = fill("fill", DAY, DAY + timedelta(hours=1))
    assert result.created == 61
    runs = backfill_runs(job)
    assert [run.scheduled_for for run in runs] == [DAY + timedelta(minutes=m) for m in range(61)]
    assert {run.status for run in runs} == {RunStatus.SCHEDULED}
    entry = AuditEntry.objects.get(action="backfill")
    assert entry.job_name == "fill" and entry.after == {
        "since": DAY.isoformat(),
        "until": (DAY + timedelta(hours=1)).isoformat(),
        "created": 61,
    }


def test_a_slot_that_has_a_run_keeps_it_and_a_second_backfill_makes_nothing(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("fill", schedule=MINUTELY)
    slot_records.insert_scheduled([(job.pk, DAY + timedelta(minutes=5))])
    slot_records.insert_missed([(job.pk, DAY + timedelta(minutes=6), "every beat was down")])
    first = fill("fill", DAY, DAY + timedelta(minutes=9))
    assert (first.created, first.plan.on_record) == (8, 2)
    again = fill("fill", DAY, DAY + timedelta(minutes=9))
    assert (again.created, len(again.plan.missing), again.plan.on_record) == (0, 0, 10)
    assert JobRun.objects.filter(job=job).count() == 10


def test_a_beat_firing_a_slot_a_backfill_made_inserts_nothing(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("fill", schedule=MINUTELY)
    fill("fill", DAY, DAY)
    assert slot_records.insert_scheduled([(job.pk, DAY)]) == []
    assert JobRun.objects.filter(job=job).count() == 1


def test_the_plan_is_made_with_the_create_so_concurrent_backfills_make_each_slot_once(
    make_job: Callable[..., Job],
) -> None:
    # Two planners saw the same empty range; the unique index decides between their inserts.
    job = make_job("fill", schedule=MINUTELY)
    now = datetime(2026, 3, 2, tzinfo=UTC)
    first = backfill.plan(job, DAY, DAY + timedelta(minutes=29), now=now)
    second = backfill.plan(job, DAY + timedelta(minutes=10), DAY + timedelta(minutes=39), now=now)
    assert backfill.create(first) == 30
    assert backfill.create(second) == 10
    assert JobRun.objects.filter(job=job).count() == 40


def test_cron_slots_follow_the_job_s_time_zone_across_a_dst_change(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("berlin", schedule=Cron(expr="30 2 * * *", tz="Europe/Berlin"))
    # 2026-03-29: Berlin springs forward at 02:00, so 02:30 does not exist that day.
    fill("berlin", datetime(2026, 3, 27, tzinfo=UTC), datetime(2026, 3, 31, tzinfo=UTC))
    slots = [run.scheduled_for for run in backfill_runs(job)]
    assert len(slots) == 4
    assert slots[0] == datetime(2026, 3, 27, 1, 30, tzinfo=UTC)  # CET, +01:00
    assert slots[-1] == datetime(2026, 3, 30, 0, 30, tzinfo=UTC)  # CEST, +02:00


def test_a_dry_run_counts_and_makes_nothing(make_job: Callable[..., Job]) -> None:
    job = make_job("fill", schedule=MINUTELY)
    result = fill("fill", DAY, DAY + timedelta(minutes=9), dry_run=True)
    assert (result.dry_run, len(result.plan.missing), result.created) == (True, 10, 0)
    assert not JobRun.objects.filter(job=job).exists()
    assert not AuditEntry.objects.filter(action="backfill").exists()


@pytest.mark.parametrize(
    ("since", "until", "options", "field"),
    [
        (DAY, DAY + timedelta(hours=2), {"max_runs": 100}, "max_runs"),
        (DAY, DAY, {"max_runs": 0}, "max_runs"),
        (DAY, DAY, {"max_runs": backfill.MAX_RUNS_LIMIT + 1}, "max_runs"),
        (DAY + timedelta(hours=1), DAY, {}, "until"),
        (DAY, datetime(2999, 1, 1, tzinfo=UTC), {}, "until"),
        (datetime(1, 1, 1, tzinfo=UTC), DAY, {}, "since"),
        (datetime(1969, 12, 31, 23, 59, tzinfo=UTC), DAY, {}, "since"),
    ],
    ids=[
        "over the cap",
        "cap of zero",
        "cap above the limit",
        "until before since",
        "future",
        "year one",
        "before the epoch",
    ],
)
def test_a_range_it_cannot_fill_is_refused_naming_the_field_and_makes_nothing(
    make_job: Callable[..., Job],
    since: datetime,
    until: datetime,
    options: dict[str, Any],
    field: str,
) -> None:
    job = make_job("fill", schedule=MINUTELY)
    with pytest.raises(services.ValidationError) as info:
        fill("fill", since, until, **options)
    assert field in info.value.message_dict
    assert not JobRun.objects.filter(job=job).exists()


def test_only_the_job_s_active_period_is_walked(make_job: Callable[..., Job]) -> None:
    """A range of decades (from the epoch) around an active hour makes that hour's slots (a walk
    of every minute since 1970 would pass the cap of 10,000 long before)."""
    job = make_job("window", schedule=MINUTELY)
    Job.objects.filter(pk=job.pk).update(
        active_from=DAY, active_until=DAY + timedelta(minutes=59, seconds=30)
    )
    result = fill("window", slots.EPOCH, DAY + timedelta(days=1), max_runs=10_000)
    assert result.created == 60
    runs = backfill_runs(job)
    assert runs[0].scheduled_for == DAY and runs[-1].scheduled_for == DAY + timedelta(minutes=59)


def test_a_continuous_job_has_no_slots_to_backfill(make_job: Callable[..., Job]) -> None:
    make_job("poller", schedule=None)
    with pytest.raises(NotTriggerable):
        fill("poller", DAY, DAY + timedelta(hours=1))


# --- release: one at a time per job, oldest first -----------------------------------------------


def test_runs_are_released_one_at_a_time_per_job_oldest_slot_first(
    make_job: Callable[..., Job],
) -> None:
    a = make_job("a", schedule=MINUTELY)
    b = make_job("b", schedule=MINUTELY)
    fill("a", DAY, DAY + timedelta(minutes=2))
    fill("b", DAY, DAY + timedelta(minutes=1))
    released = backfill.release_next()
    assert sorted((r.job_id, r.scheduled_for) for r in released) == [(a.pk, DAY), (b.pk, DAY)]
    assert backfill.release_next() == []  # each job has one in flight
    first = JobRun.objects.get(job=a, scheduled_for=DAY)
    assert first.released_at is not None and first.dispatched_at is not None
    JobRun.objects.filter(pk=first.pk).update(status=RunStatus.RUNNING)
    assert backfill.release_next([a.pk]) == []  # running is in flight too
    finish(first, RunStatus.FAILED)  # any end releases the next: a failure does not stop it
    assert [r.scheduled_for for r in backfill.release_next([a.pk])] == [DAY + timedelta(minutes=1)]


def test_a_backfill_run_s_deadline_counts_from_its_release_not_its_past_slot(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("fill", schedule=MINUTELY, start_deadline=60)
    fill("fill", DAY, DAY + timedelta(minutes=1))
    # Never expired or re-published while it waits for its release, however old its slot.
    assert sweeps.expire_scheduled() == []
    for sent in (True, False):
        assert sweeps.take_stranded(after=0, limit=100, sent=sent) == []
    (released,) = backfill.release_next()
    claim = run_records.claim(released.run_id, node="n", pid=1, task_id="t", holder="n:1")
    assert claim is not None and claim.status == RunStatus.RUNNING
    assert claim.trigger == Trigger.BACKFILL
    # The next one, released and then left for longer than its deadline, is missed.
    finish(JobRun.objects.get(pk=released.run_id))
    (late,) = backfill.release_next()
    JobRun.objects.filter(pk=late.run_id).update(released_at=DAY)
    claim = run_records.claim(late.run_id, node="n", pid=1, task_id="t2", holder="n:1:2")
    assert claim is not None and claim.status == RunStatus.MISSED
    assert "after its release" in claim.error
    assert job.pk == claim.job_id


def test_maintenance_records_a_released_run_nobody_claimed_missed_and_releases_the_next(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("fill", schedule=MINUTELY, start_deadline=60)
    fill("fill", DAY, DAY + timedelta(minutes=1))
    (released,) = backfill.release_next()
    JobRun.objects.filter(pk=released.run_id).update(released_at=DAY)
    assert sweeps.expire_scheduled() == [released.run_id]
    assert [r.scheduled_for for r in backfill.release_next()] == [DAY + timedelta(minutes=1)]
    assert JobRun.objects.filter(job=job, status=RunStatus.MISSED).count() == 1


def test_a_waiting_backfill_run_does_not_make_a_coalescing_job_skip_its_slots(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("fill", schedule=MINUTELY, coalesce=True)
    fill("fill", DAY, DAY + timedelta(minutes=3))
    (new,) = slot_records.insert_scheduled([(job.pk, DAY + timedelta(days=1))])
    assert coalescing.skip_while_queued([(new.run_id, job.pk)]) == set()


# --- the CLI and the API ------------------------------------------------------------------------


def jobs(*args: str) -> str:
    out = io.StringIO()
    call_command("jobs", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_cli_backfill_prints_what_it_made_and_json_says_the_same(
    make_job: Callable[..., Job],
) -> None:
    make_job("fill", schedule=MINUTELY)
    range_ = ("--since", "2026-03-01T00:00:00Z", "--until", "2026-03-01T00:09:00Z")
    out = jobs("backfill", "fill", *range_, "--dry-run")
    assert "would make 10 run(s); 0 slot(s) already have one" in out
    record = json.loads(jobs("backfill", "fill", *range_, "--json"))
    assert (record["created"], record["missing"], record["dry_run"]) == (10, 10, False)
    assert record["first_slot"] == "2026-03-01T00:00:00+00:00"
    assert "made 0 run(s); 10 slot(s) already have one" in jobs("backfill", "fill", *range_)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (("--since", "2026-03-01", "--until", "yesterday"), "--until"),
        (("--since", "2026-03-02", "--until", "2026-03-01"), "--until"),
        (("--since", "2026-03-01", "--until", "2026-03-02", "--max-runs", "5"), "--max-runs"),
        (("--until", "2026-03-01"), "--since"),
    ],
    ids=["not a time", "until before since", "over the cap", "no since"],
)
def test_cli_backfill_errors_name_the_flag(
    make_job: Callable[..., Job], flags: tuple[str, ...], named: str
) -> None:
    make_job("fill", schedule=MINUTELY)
    with pytest.raises(CommandError) as info:
        jobs("backfill", "fill", *flags)
    assert named in str(info.value)
    assert not JobRun.objects.exists()


@pytest.fixture
def api() -> Client:
    secret = tokens.create("tests", actor=Actor.code("tests"))[1]
    return Client(headers={"authorization": f"Bearer {secret}"})


def post(api: Client, name: str, body: object) -> Any:
    return api.post(f"/api/jobs/{name}/backfill", body, content_type="application/json")


def test_api_backfill_makes_the_runs_and_a_dry_run_only_counts(
    api: Client, make_job: Callable[..., Job]
) -> None:
    job = make_job("fill", schedule=MINUTELY)
    body = {"since": "2026-03-01T00:00:00Z", "until": "2026-03-01T01:00:00+01:00"}
    dry = post(api, "fill", {**body, "dry_run": True})
    assert dry.status_code == 200 and dry.json()["missing"] == 1
    made = post(api, "fill", body)
    assert made.status_code == 201, made.content
    assert made.json()["created"] == 1 and backfill_runs(job)[0].scheduled_for == DAY
    assert AuditEntry.objects.get(action="backfill").actor == "token:tests"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"until": "2026-03-01T00:00:00Z"}, "since"),
        ({"since": "2026-03-01T00:00:00Z", "until": "soon"}, "until"),
        ({"since": "2026-03-01T00:00:00", "until": "2026-03-01T00:00:00Z"}, "since"),
        ({"since": "2026-03-01T00:00:00Z", "until": "2026-03-02T00:00:00Z", "max_runs": 2},
         "max_runs"),
        ({"since": "2026-03-01T00:00:00Z", "until": "2026-03-01T00:00:00Z", "max_runs": "9"},
         "max_runs"),
        ({"since": "2026-03-01T00:00:00Z", "until": "2026-03-01T00:00:00Z", "dry_run": 1},
         "dry_run"),
        ({"since": "2026-03-01T00:00:00Z", "until": "2026-03-01T00:00:00Z", "every": 1}, "every"),
        (["not", "an", "object"], "body"),
    ],
    ids=["no since", "bad until", "naive since", "over the cap", "cap not a number",
         "dry_run not a boolean", "unknown field", "not an object"],
)  # fmt: skip
def test_api_backfill_errors_are_400_naming_the_field(
    api: Client, make_job: Callable[..., Job], body: object, field: str
) -> None:
    make_job("fill", schedule=MINUTELY)
    response = post(api, "fill", body)
    assert response.status_code == 400, response.content
    assert field in response.json()["fields"]
    assert not JobRun.objects.exists()


def test_api_backfill_of_a_continuous_or_unknown_job_or_with_a_read_only_token(
    api: Client, make_job: Callable[..., Job]
) -> None:
    make_job("poller", schedule=None)
    body = {"since": "2026-03-01T00:00:00Z", "until": "2026-03-01T00:00:00Z"}
    assert post(api, "poller", body).status_code == 409
    assert post(api, "nope", body).status_code == 404
    reader = tokens.create("reader", actor=Actor.code("tests"), read_only=True)[1]
    reading = Client(headers={"authorization": f"Bearer {reader}"})
    make_job("fill", schedule=MINUTELY)
    assert post(reading, "fill", body).status_code == 403


# --- the admin's forms on a job's page ----------------------------------------------------------


def test_admin_backfill_page_dry_runs_then_makes_the_runs(
    admin_client: Client, make_job: Callable[..., Job]
) -> None:
    job = make_job("fill", schedule=MINUTELY)
    page = f"/admin/jobs/job/{job.pk}/backfill/"
    assert 'href="' + page + '"' in admin_client.get(f"/admin/jobs/job/{job.pk}/change/").text
    form = {"since": "2026-03-01 00:00:00", "until": "2026-03-01 00:09:00", "max_runs": "100"}
    dry = admin_client.post(page, {**form, "dry_run": "on"}, follow=True)
    assert "Would make 10 run(s)" in dry.text and not JobRun.objects.exists()
    made = admin_client.post(page, form, follow=True)
    assert made.redirect_chain[-1][0] == f"/admin/jobs/job/{job.pk}/change/"
    assert "Made 10 backfill run(s)" in made.text
    assert len(backfill_runs(job)) == 10
    assert AuditEntry.objects.get(action="backfill").actor == "user:admin"


@pytest.mark.parametrize(
    ("form", "error"),
    [
        ({"since": "2026-03-01 00:00", "until": "2026-03-02 00:00", "max_runs": "5"},
         "more than 5 slots"),
        ({"since": "2026-03-02 00:00", "until": "2026-03-01 00:00", "max_runs": "5"},
         "Must not be before since"),
        ({"since": "soon", "until": "2026-03-01 00:00", "max_runs": "5"}, "Enter a valid date"),
    ],
    ids=["over the cap", "until before since", "not a time"],
)  # fmt: skip
def test_admin_backfill_page_shows_what_is_wrong_beside_the_field(
    admin_client: Client, make_job: Callable[..., Job], form: dict[str, str], error: str
) -> None:
    job = make_job("fill", schedule=MINUTELY)
    response = admin_client.post(f"/admin/jobs/job/{job.pk}/backfill/", form)
    assert response.status_code == 200
    assert error in response.text and 'class="errorlist' in response.text
    assert not JobRun.objects.exists()


def test_admin_run_with_arguments_runs_once_with_them_and_refuses_bad_ones(
    admin_client: Client, make_job: Callable[..., Job]
) -> None:
    job = make_job("fill", schedule=MINUTELY)
    page = f"/admin/jobs/job/{job.pk}/run/"
    bad = admin_client.post(page, {"kwargs": '{"nope": 1}'})
    assert bad.status_code == 200 and "nope" in bad.text and not JobRun.objects.exists()
    broken = admin_client.post(page, {"kwargs": "{"})
    assert broken.status_code == 200 and 'class="errorlist' in broken.text
    assert not JobRun.objects.exists()
    made = admin_client.post(page, {"kwargs": '{"seconds": 0.5}'}, follow=True)
    run = JobRun.objects.get(job=job)
    assert f"Triggered run #{run.pk}" in made.text
    assert run.kwargs == {**job.kwargs, "seconds": 0.5} and run.trigger == Trigger.MANUAL


def test_admin_job_pages_of_a_missing_job_are_404(admin_client: Client) -> None:
    assert admin_client.get("/admin/jobs/job/999999/backfill/").status_code == 404
    assert admin_client.get("/admin/jobs/job/999999/run/").status_code == 404
