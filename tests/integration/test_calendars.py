"""Calendars on the beat, against real PostgreSQL, with an injected clock: slots in a blackout
window (one job's or every job's) and on a business-days job's weekends and holidays are recorded
skipped saying why and never published; no slot is recorded outside a job's active period; the
edges refuse what cannot be a calendar, naming the field."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import redis
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client

from jobs import services
from jobs.audit import Actor
from jobs.beat.scheduler import ClusterScheduler
from jobs.models import AuditEntry, Blackout, Job, JobRun, RunStatus, ScheduleError
from jobs.schedule.kinds import Cron
from jobs.web import tokens
from jobs.workflow import backfill
from project.celery import app
from tests.support.virtual_clock import VirtualClock

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "tests-calendars"
# Wednesday 2025-12-24 09:00 UTC, the day before Christmas (in the past: the beat's catch-up
# trusts the database clock over a clock ahead of it).
START = datetime(2025, 12, 24, 9, 0, tzinfo=UTC)
ACTOR = Actor.code("tests")


def _owed_from(start: datetime, job: Job) -> Job:
    """``job``, as if created at ``start``: owed no slot before it."""
    Job.objects.filter(pk=job.pk).update(updated_at=start)
    return job


def _run_beat(until: datetime, step: timedelta = timedelta(hours=1)) -> None:
    clock = VirtualClock(START)
    beat = ClusterScheduler(app=app, clock=clock, maintain=False)
    while clock.now <= until:
        beat.tick_at(clock.now)
        clock.now += step


def _records(job: Job) -> list[tuple[datetime, str, str]]:
    return list(
        JobRun.objects.filter(job=job)
        .order_by("scheduled_for")
        .values_list("scheduled_for", "status", "error")
    )


def test_slots_in_a_blackout_window_are_recorded_skipped_and_not_published(
    make_job: Callable[..., Job], redis_broker: redis.Redis
) -> None:
    frozen = _owed_from(START, make_job("frozen", queue=QUEUE))
    other = _owed_from(START, make_job("other", queue=QUEUE))
    services.add_blackout(
        "release-freeze", START + timedelta(hours=2), START + timedelta(hours=4), actor=ACTOR
    )
    services.add_blackout(
        "only-other", START + timedelta(hours=5), START + timedelta(hours=6), actor=ACTOR,
        job_name="other",
    )  # fmt: skip
    _run_beat(START + timedelta(hours=6, minutes=1))
    skipped = {
        slot: error for slot, status, error in _records(frozen) if status == RunStatus.SKIPPED
    }
    # Half-open: the slot at its end runs.
    assert skipped == {START + timedelta(hours=h): "blackout: release-freeze" for h in (2, 3)}
    other_skipped = [slot for slot, status, _ in _records(other) if status == RunStatus.SKIPPED]
    assert other_skipped == [START + timedelta(hours=h) for h in (2, 3, 5)]
    assert len(_records(frozen)) == 6  # hours 1..6: every slot has its one record
    published = JobRun.objects.filter(status=RunStatus.SCHEDULED).count()
    assert redis_broker.llen(QUEUE) == published == 6 + 6 - 5


def test_a_business_days_job_skips_weekends_and_its_holidays_in_its_time_zone(
    make_job: Callable[..., Job], redis_broker: redis.Redis
) -> None:
    job = make_job(
        "payroll",
        schedule=Cron(expr="0 9 * * *", tz="America/New_York"),
        business_days_only=True,
        holiday_calendar="US",
        queue=QUEUE,
    )
    _owed_from(START, job)
    _run_beat(START + timedelta(days=5), step=timedelta(minutes=30))
    records = [(slot.date().isoformat(), status, error) for slot, status, error in _records(job)]
    assert records == [
        ("2025-12-24", RunStatus.SCHEDULED, ""),  # Wednesday 09:00 EST = 14:00 UTC
        ("2025-12-25", RunStatus.SKIPPED, "holiday: Christmas Day on 2025-12-25 (US)"),
        ("2025-12-26", RunStatus.SCHEDULED, ""),
        ("2025-12-27", RunStatus.SKIPPED,
         "weekend: Saturday 2025-12-27 (America/New_York) is not a business day"),
        ("2025-12-28", RunStatus.SKIPPED,
         "weekend: Sunday 2025-12-28 (America/New_York) is not a business day"),
    ]  # fmt: skip
    assert redis_broker.llen(QUEUE) == 2


def test_no_slot_is_recorded_outside_the_active_period(make_job: Callable[..., Job]) -> None:
    job = make_job(
        "campaign",
        active_from=START + timedelta(hours=2),
        active_until=START + timedelta(hours=4),
        queue=QUEUE,
    )
    _owed_from(START, job)
    _run_beat(START + timedelta(hours=6, minutes=1))
    assert [slot for slot, _, _ in _records(job)] == [START + timedelta(hours=h) for h in (2, 3, 4)]


def test_a_backfill_skips_what_the_beats_would(make_job: Callable[..., Job]) -> None:
    job = _owed_from(START, make_job("fill", business_days_only=True, queue=QUEUE))
    services.add_blackout(
        "freeze", START + timedelta(hours=1), START + timedelta(hours=2), actor=ACTOR
    )
    services.backfill_job(
        "fill", START, START + timedelta(days=3, hours=23), actor=ACTOR, max_runs=1000
    )
    records = _records(job)
    skipped = [(slot, error) for slot, status, error in records if status == RunStatus.SKIPPED]
    assert (START + timedelta(hours=1), "blackout: freeze") in skipped
    # Saturday 2025-12-27: all 24 slots skipped as a weekend.
    assert sum(error.startswith("weekend: Saturday") for _, error in skipped) == 24
    assert sum(error.startswith("weekend: Sunday") for _, error in skipped) == 9  # to 08:00
    assert len(skipped) == 1 + 24 + 9
    assert len(records) == 96
    # Released one at a time, skipped slots passed over: the first is the first that runs.
    released = JobRun.objects.filter(job=job, released_at__isnull=False)
    assert list(released.values_list("scheduled_for", flat=True)) == [START]
    assert backfill.release_next() == []


def test_a_holiday_calendar_written_around_validation_sets_the_job_aside(
    make_job: Callable[..., Job],
) -> None:
    job = _owed_from(START, make_job("broken", queue=QUEUE))
    healthy = _owed_from(START, make_job("healthy", queue=QUEUE))
    with connection.cursor() as cursor:
        cursor.execute("UPDATE jobs_job SET holiday_calendar = 'XX' WHERE id = %s", [job.pk])
    _run_beat(START + timedelta(hours=2, minutes=1))
    assert _records(job) == []
    assert "XX" in ScheduleError.objects.get(job=job).error
    assert len(_records(healthy)) == 2


def test_a_blackout_must_end_after_it_starts_and_be_named(make_job: Callable[..., Job]) -> None:
    with pytest.raises(ValidationError) as info:
        services.add_blackout("backwards", START, START - timedelta(hours=1), actor=ACTOR)
    assert "ends_at" in info.value.message_dict
    with pytest.raises(ValidationError) as info:
        services.add_blackout("", START, START + timedelta(hours=1), actor=ACTOR)
    assert "name" in info.value.message_dict
    assert not Blackout.objects.exists()


@pytest.mark.parametrize(
    ("policies", "field"),
    [
        ({"holiday_calendar": "XX"}, "holiday_calendar"),
        ({"active_from": START, "active_until": START}, "active_until"),
    ],
)
def test_a_job_calendar_that_cannot_hold_is_refused(
    make_job: Callable[..., Job], policies: dict[str, object], field: str
) -> None:
    with pytest.raises(ValidationError) as info:
        make_job("bad", **policies)
    assert field in info.value.message_dict


# --- the CLI and the API ------------------------------------------------------------------------


def jobs(*args: str) -> str:
    out = io.StringIO()
    call_command("jobs", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_cli_adds_lists_and_removes_blackouts_audited(make_job: Callable[..., Job]) -> None:
    make_job("nightly")
    out = jobs(
        "blackout", "add", "freeze", "--from", "2026-12-20T00:00Z", "--until", "2027-01-04Z",
        "--job", "nightly", "--description", "year-end freeze",
    )  # fmt: skip
    assert out.startswith("added blackout freeze over nightly from 2026-12-20T00:00:00+00:00")
    (listed,) = json.loads(jobs("blackout", "list", "--json"))
    assert listed["job"] == "nightly" and listed["description"] == "year-end freeze"
    jobs("blackout", "remove", "freeze")
    assert not Blackout.objects.exists()
    actions = list(AuditEntry.objects.order_by("id").values_list("action", flat=True))
    assert actions[-2:] == ["blackout_add", "blackout_remove"]
    with pytest.raises(CommandError) as info:
        jobs("blackout", "remove", "freeze")
    assert "no blackout window named 'freeze'" in str(info.value)
    with pytest.raises(CommandError) as info:
        jobs("blackout", "add", "x", "--from", "2026-12-20T00:00Z", "--until", "2026-12-19Z")
    assert "--until" in str(info.value)
    with pytest.raises(CommandError) as info:
        jobs("blackout", "add", "x", "--from", "2026-12-20T00:00Z", "--until", "2027-01-04Z",
             "--job", "nope")  # fmt: skip
    assert str(info.value) == "jobs blackout add: error: --job: no job named 'nope'"
    assert info.value.returncode == 2


def test_cli_sets_a_job_s_calendar_and_names_a_bad_one(make_job: Callable[..., Job]) -> None:
    jobs(
        "add", "payroll", "--task", "tests.record", "--cron", "0 9 * * *", "--tz",
        "America/New_York", "--kwargs", '{"log": "-"}', "--business-days-only", "yes",
        "--holiday-calendar", "US", "--active-until", "2027-12-31T00:00Z",
    )  # fmt: skip
    job = Job.objects.get(name="payroll")
    assert (job.business_days_only, job.holiday_calendar) == (True, "US")
    assert job.active_until == datetime(2027, 12, 31, tzinfo=UTC)
    with pytest.raises(CommandError) as info:
        jobs(
            "add", "bad", "--task", "tests.record", "--every", "1h", "--kwargs",
            '{"log": "-"}', "--holiday-calendar", "Narnia",
        )  # fmt: skip
    assert "--holiday-calendar" in str(info.value)


def test_api_blackouts_and_a_job_s_calendar(make_job: Callable[..., Job]) -> None:
    make_job("nightly")
    secret = tokens.create("tests", actor=ACTOR)[1]
    api = Client(headers={"authorization": f"Bearer {secret}"})
    window = {"name": "freeze", "starts_at": "2026-12-20T00:00:00Z",
              "ends_at": "2027-01-04T00:00:00Z"}  # fmt: skip
    made = api.post("/api/blackouts", window, content_type="application/json")
    assert made.status_code == 201 and made.json()["job"] is None
    twice = api.post("/api/blackouts", window, content_type="application/json")
    assert twice.status_code == 400 and "name" in twice.json()["fields"]
    backwards = {**window, "name": "b", "ends_at": "2026-12-01T00:00:00Z"}
    bad = api.post("/api/blackouts", backwards, content_type="application/json")
    assert bad.status_code == 400 and "ends_at" in bad.json()["fields"]
    unknown_job = api.post(
        "/api/blackouts", {**window, "name": "c", "job": "nope"}, content_type="application/json"
    )
    assert unknown_job.status_code == 400
    assert unknown_job.json()["fields"] == {"job": ["no job named 'nope'"]}
    assert [w["name"] for w in api.get("/api/blackouts").json()["results"]] == ["freeze"]
    assert api.delete("/api/blackouts/freeze").status_code == 204
    assert api.delete("/api/blackouts/freeze").status_code == 404

    patched = api.patch(
        "/api/jobs/nightly",
        {"business_days_only": True, "holiday_calendar": "GB-ENG",
         "active_from": "2027-01-01T00:00:00+01:00"},
        content_type="application/json",
    )  # fmt: skip
    assert patched.status_code == 200, patched.content
    assert patched.json()["active_from"] == "2026-12-31T23:00:00Z"
    refused = api.patch(
        "/api/jobs/nightly", {"holiday_calendar": "XX"}, content_type="application/json"
    )
    assert refused.status_code == 400 and "holiday_calendar" in refused.json()["fields"]
