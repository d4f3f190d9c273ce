"""How jobs and runs are shown (jobs.values.serializers): the same words and records in the admin,
the dashboard, the CLI and the API, and a broken row shown as broken rather than failing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from jobs.audit import Actor, record
from jobs.broker.messages import task_id_for
from jobs.conf import get_ops_conf
from jobs.models import (
    JOB_DISPLAY_RELATED,
    AuditAction,
    Job,
    JobRun,
    RunStatus,
    ScheduleError,
    Trigger,
)
from jobs.registry import POLICY_FIELDS
from jobs.schedule.kinds import Cron, Every, Triggered
from jobs.values import serializers
from jobs.workflow.backfill import BackfillPlan, BackfillResult
from tests.support.cached_settings import overriding

pytestmark = pytest.mark.django_db

NOW = datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC)


def _shown(job: Job) -> Job:
    return Job.objects.select_related(*JOB_DISPLAY_RELATED).get(pk=job.pk)


@pytest.fixture
def flower_at() -> Iterator[Callable[[str], None]]:
    with overriding(get_ops_conf) as override:
        yield lambda url: override(FLOWER_URL=url)


def test_schedule_words_say_the_schedule(make_job: Callable[..., Job]) -> None:
    assert serializers.schedule_words(_shown(make_job("a", schedule=Every(300)))) == (
        "every 5 minutes"
    )
    triggered = _shown(make_job("b", schedule=Triggered()))
    assert serializers.schedule_words(triggered).startswith("when triggered")


def test_an_unreadable_schedule_is_said_so_not_raised(make_job: Callable[..., Job]) -> None:
    job = _shown(make_job("a", schedule=Every(300)))
    assert job.periodic_task is not None
    job.periodic_task.interval = None  # a row written around validation
    assert serializers.schedule_words(job) == (
        "unreadable schedule: beat entry 'job:a' has no schedule"
    )
    assert serializers.next_slot(job, timezone.now()) is None


def test_schedule_error_is_the_beats_reason_or_none(make_job: Callable[..., Job]) -> None:
    job = make_job("a")
    assert serializers.schedule_error(_shown(job)) is None
    ScheduleError.objects.create(job=job, error="no next date", beat="b1")
    assert serializers.schedule_error(_shown(job)) == "no next date"


def test_next_slot_is_the_schedules_next_after_now(make_job: Callable[..., Job]) -> None:
    job = _shown(make_job("a", schedule=Cron("0 * * * *", tz="UTC")))
    assert serializers.next_slot(job, NOW) == datetime(2030, 1, 1, 13, 0, tzinfo=UTC)


def test_no_next_slot_when_paused_triggered_or_expired(make_job: Callable[..., Job]) -> None:
    paused = _shown(make_job("a", enabled=False))
    assert serializers.next_slot(paused, NOW) is None
    assert serializers.next_slot_words(paused, NOW, str) == "none: paused"
    expiring = _shown(make_job("b", schedule=Cron("0 * * * *", tz="UTC")))
    expiring.expires_at = datetime(2030, 1, 1, 12, 30, tzinfo=UTC)
    assert serializers.next_slot(expiring, NOW) is None  # its next slot is after it expires
    expiring.expires_at = NOW - timedelta(minutes=1)
    assert serializers.next_slot_words(expiring, NOW, lambda at: f"<{at:%H:%M}>") == (
        "none: expired <11:59>"
    )
    triggered = _shown(make_job("c", schedule=Triggered()))
    assert serializers.next_slot(triggered, NOW) is None


def test_next_slot_words_write_the_slot_as_asked(make_job: Callable[..., Job]) -> None:
    job = _shown(make_job("a", schedule=Cron("0 * * * *", tz="UTC")))
    words = serializers.next_slot_words(job, NOW, lambda at: "" if at is None else at.isoformat())
    assert words == "2030-01-01T13:00:00+00:00"


def test_flower_links_tasks_not_tenures(
    make_job: Callable[..., Job], flower_at: Callable[[str], None]
) -> None:
    run = JobRun.objects.create(job=make_job("a"), scheduled_for=NOW)
    flower_at("")
    assert serializers.flower_task_url(run) is None
    flower_at("https://flower.example.com/")
    assert serializers.flower_task_url(run) == (
        f"https://flower.example.com/task/{task_id_for(run.pk)}"
    )
    run.trigger = Trigger.CONTINUOUS
    assert serializers.flower_task_url(run) is None


def test_job_fields_and_the_apis_record(make_job: Callable[..., Job]) -> None:
    upstream = make_job("extract")
    report = make_job("report", schedule=Every(60), after=["extract"], queue="reports")
    make_job("load", schedule=Triggered(), after=["report"])
    job = _shown(report)
    fields = serializers.job_fields(job)
    assert (fields["name"], fields["task"], fields["kind"], fields["enabled"]) == (
        "report",
        "tests.record",
        "periodic",
        True,
    )
    assert (fields["schedule"], fields["schedule_error"]) == ("every minute", None)
    assert set(POLICY_FIELDS) <= set(fields) and fields["queue"] == "reports"
    assert (fields["after"], fields["before"]) == (["extract"], ["load"])
    assert serializers.upstream_names(job) == [upstream.name]
    record = serializers.job_record(job, NOW)
    assert {key: record[key] for key in fields} == fields
    assert record["next_slot"] == serializers.next_slot(job, NOW) is not None
    assert (record["managed_by_code"], record["created_at"]) == (False, job.created_at)


def test_an_unsaved_job_has_no_dependencies() -> None:
    unsaved = Job(name="new")
    assert serializers.upstream_names(unsaved) == []
    assert serializers.downstream_names(unsaved) == []


def _ran(job: Job, status: RunStatus, seconds: float | None) -> JobRun:
    slot = NOW + timedelta(hours=JobRun.objects.filter(job=job).count())
    run = JobRun.objects.create(
        job=job,
        scheduled_for=slot,
        status=status,
        started_at=slot + timedelta(seconds=2),
        finished_at=None if seconds is None else slot + timedelta(seconds=2 + seconds),
        node="w1@h",
        error="boom" if status == RunStatus.FAILED else "",
        traceback="Traceback ..." if status == RunStatus.FAILED else "",
    )
    return JobRun.objects.select_related("job").get(pk=run.pk)


def test_a_lost_runs_duration_is_an_upper_bound(make_job: Callable[..., Job]) -> None:
    job = make_job("a")
    lost = _ran(job, RunStatus.LOST, 30)
    assert serializers.duration_upper_bound(lost)
    assert serializers.duration_words(lost, "30s") == "≤ 30s (until recorded lost)"
    done = _ran(job, RunStatus.SUCCEEDED, 30)
    assert not serializers.duration_upper_bound(done)
    assert serializers.duration_words(done, "30s") == "30s"
    running = _ran(job, RunStatus.LOST, None)
    assert not serializers.duration_upper_bound(running)


def test_run_fields_and_the_apis_record(make_job: Callable[..., Job]) -> None:
    run = _ran(make_job("a"), RunStatus.FAILED, 3)
    fields = serializers.run_fields(run)
    assert list(fields) == list(serializers.RUN_FIELDS)
    assert (fields["id"], fields["job"], fields["status"], fields["error"]) == (
        run.pk,
        "a",
        "failed",
        "boom",
    )
    record = serializers.run_record(run)
    assert "traceback" not in record
    assert (record["lag_seconds"], record["duration_seconds"]) == (2.0, 3.0)
    assert (record["duration_upper_bound"], record["retry_of"]) == (False, None)
    assert record["task_id"] == run.task_id and record["idempotency_key"] is None
    assert serializers.run_record(run, with_traceback=True)["traceback"] == "Traceback ..."


def test_audit_record(make_job: Callable[..., Job]) -> None:
    job = make_job("a")
    entry = record(
        Actor.code("tests"), AuditAction.PAUSE, job=job, job_name="a", before={"enabled": True}
    )
    shown = serializers.audit_record(entry)
    assert shown == {
        "id": entry.pk,
        "at": entry.at,
        "actor": "code:tests",
        "source": "code",
        "action": "pause",
        "job": "a",
        "target": None,
        "before": {"enabled": True},
        "after": None,
    }


def test_backfill_record(make_job: Callable[..., Job]) -> None:
    job = make_job("a")
    slots = (NOW, NOW + timedelta(hours=1), NOW + timedelta(hours=2))
    plan = BackfillPlan(
        job=job, since=NOW, until=NOW + timedelta(hours=3), missing=slots, on_record=1
    )
    shown = serializers.backfill_record(BackfillResult(plan=plan, created=3, dry_run=False))
    assert shown == {
        "job": "a",
        "since": NOW,
        "until": NOW + timedelta(hours=3),
        "dry_run": False,
        "missing": 3,
        "on_record": 1,
        "created": 3,
        "first_slot": slots[0],
        "last_slot": slots[-1],
        "slots": [],  # only a dry run lists them
    }
    empty = BackfillPlan(job=job, since=NOW, until=NOW, missing=(), on_record=0)
    nothing = serializers.backfill_record(BackfillResult(plan=empty, created=0, dry_run=True))
    assert (nothing["first_slot"], nothing["last_slot"], nothing["dry_run"]) == (None, None, True)
