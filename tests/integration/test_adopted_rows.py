"""django-celery-beat rows adopted with what django-celery-beat's own scheduler gives them
(``django_celery_beat.schedulers.ModelEntry``): the row's headers and the ``periodic_task_name``
header on every run's message, as the task itself reads them; an absolute ``expires``; a
``one_off`` row; disabled rows; one task in several rows. Real PostgreSQL and the real broker,
beats on an injected clock, and each message executed as a worker executes it (Celery's request
and tracer, in this thread)."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from celery.worker.request import Request
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone
from django_celery_beat.models import ClockedSchedule, IntervalSchedule, PeriodicTask

from jobs import services
from jobs.audit import Actor
from jobs.beat import adoption, entries, retiring
from jobs.beat.scheduler import ClusterScheduler
from jobs.broker import bulk_publish, messages
from jobs.models import AuditAction, AuditEntry, Job, JobRun, Trigger
from jobs.upkeep import maintenance
from jobs.values import serializers
from project.celery import app
from tests.support.pauses import paused
from tests.support.virtual_clock import VirtualClock

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "tests-adopted-rows"
HEADERS = "tests.support.plain_tasks.request_headers"
APPEND = "tests.support.plain_tasks.append"
TESTS = Actor.code("tests")


@pytest.fixture
def clock() -> VirtualClock:
    # Behind the database's clock, so edits made by the test are "after" the beat's now, but
    # within a run's start deadline (the claim judges it by the database's clock).
    return VirtualClock(timezone.now().replace(second=0, microsecond=0))


def _beat(clock: Callable[[], datetime]) -> ClusterScheduler:
    return ClusterScheduler(app=app, clock=clock, maintain=False)


def _every(seconds: int) -> IntervalSchedule:
    schedule, _ = IntervalSchedule.objects.get_or_create(
        every=seconds, period=IntervalSchedule.SECONDS
    )
    return schedule


def _entry(name: str, task: str = HEADERS, **fields: Any) -> PeriodicTask:
    fields.setdefault("interval", _every(10))
    fields.setdefault("queue", QUEUE)
    return PeriodicTask.objects.create(name=name, task=task, **fields)


def _execute_queued() -> int:
    """Execute each message waiting in ``QUEUE`` as a worker does; how many there were."""
    executed = 0
    with app.connection_for_read() as conn:
        channel: Any = conn.default_channel
        while (message := channel.basic_get(QUEUE, no_ack=True)) is not None:
            Request(message, app=app, hostname="tests@worker").execute()
            executed += 1
    return executed


def _seen(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


# --- headers, and django-celery-beat's periodic_task_name ----------------------------------


def test_a_rows_headers_and_its_name_reach_the_task_as_under_stock_beat(
    tmp_path: Path, redis_broker: redis.Redis, clock: VirtualClock
) -> None:
    log = tmp_path / "seen.log"
    headers = {"tenant": "acme", "trace": {"sampled": True, "ids": [1, 2]}}
    _entry("Tenant report", args=json.dumps([str(log)]), headers=json.dumps(headers))
    # What the task reads when django-celery-beat's scheduler sends the row (ModelEntry's
    # options: the row's headers plus periodic_task_name), executed the same way.
    stock = {**headers, "periodic_task_name": "Tenant report"}
    app.send_task(HEADERS, args=[str(log)], queue=QUEUE, headers=stock)
    assert _execute_queued() == 1
    [under_stock_beat] = _seen(log)
    assert under_stock_beat == {
        "periodic_task_name": "Tenant report",
        "tenant": "acme",
        "headers": stock,
    }

    beat = _beat(clock)
    slot = clock.now + timedelta(seconds=10)
    beat.tick_at(slot + timedelta(milliseconds=5))  # adopts the row, then fires its slot
    job = Job.objects.get(name="Tenant report")
    assert job.adopted and job.headers == headers
    assert _execute_queued() == 1
    assert JobRun.objects.get(job=job, scheduled_for=slot).status == "succeeded"
    # The same message in a burst (jobs.broker.bulk_publish), from the beat's own job.
    run = JobRun.objects.create(job=job, scheduled_for=slot + timedelta(seconds=10))
    with app.producer_or_acquire() as producer:
        publication = bulk_publish.Publication(beat._entries[job.pk].job, run.pk, run.scheduled_for)
        assert bulk_publish.publish_burst([publication], producer) == 1
    assert _execute_queued() == 1
    assert _seen(log) == [under_stock_beat] * 3


def test_a_plain_job_without_headers_sees_no_custom_header(
    tmp_path: Path, redis_broker: redis.Redis
) -> None:
    log = tmp_path / "seen.log"
    job = Job.objects.create(name="plain", task=HEADERS, args=[str(log)], queue=QUEUE)
    run = JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.MANUAL)
    messages.publish(job, run.pk, run.scheduled_for)
    assert _execute_queued() == 1
    assert _seen(log) == [{"periodic_task_name": None, "tenant": None, "headers": None}]


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        pytest.param("{oops", "its headers are not JSON", id="not-json"),
        pytest.param('["a"]', "its headers must be a JSON object", id="not-object"),
        pytest.param('{"task": "other.task"}', "'task': Celery's own message header", id="task"),
        pytest.param('{"id": "x", "eta": 1}', "'eta', 'id': Celery's own", id="id-eta"),
    ],
)
def test_headers_no_job_can_send_are_refused_with_the_reason(headers: str, reason: str) -> None:
    _entry("bad", headers=headers)
    [verdict] = adoption.adopt()
    assert not verdict.adoptable and reason in verdict.reason
    assert not Job.objects.exists()


def test_headers_follow_edits_both_ways() -> None:
    entry = _entry("edited", args='["/dev/null"]', headers='{"tenant": "acme"}')
    adoption.adopt()
    job = Job.objects.get(name="edited")
    PeriodicTask.objects.filter(pk=entry.pk).update(headers='{"tenant": "globex"}')
    adoption.sync([job.pk])
    job.refresh_from_db()
    assert job.headers == {"tenant": "globex"}
    # Edited to a header no job may send: the job is set aside, it keeps what it had.
    PeriodicTask.objects.filter(pk=entry.pk).update(headers='{"task": "other.task"}')
    assert "Celery's own message header" in adoption.sync([job.pk])[job.pk][1]
    job.refresh_from_db()
    assert job.headers == {"tenant": "globex"}
    # And the job's headers are written to its row (what a return to stock beat reads).
    Job.objects.filter(pk=job.pk).update(headers={"tenant": "initech"})
    entries.refresh(Job.objects.select_related("periodic_task").get(pk=job.pk))
    entry.refresh_from_db()
    assert json.loads(entry.headers) == {"tenant": "initech"}


# --- an absolute expires -------------------------------------------------------------------


def test_an_expiring_row_has_slots_until_then_each_message_expiring_with_it(
    redis_broker: redis.Redis, clock: VirtualClock
) -> None:
    expires = clock.now + timedelta(seconds=25)
    _entry("until then", args='["/dev/null"]', expires=expires)
    beat = _beat(clock)
    job = Job.objects.get(name="until then")
    assert job.expires_at == expires
    for step in range(1, 6):
        beat.tick_at(clock.now + timedelta(seconds=10 * step, milliseconds=5))
    slots = JobRun.objects.filter(job=job).order_by("scheduled_for")
    assert [slot - clock.now for slot in slots.values_list("scheduled_for", flat=True)] == [
        timedelta(seconds=10),
        timedelta(seconds=20),
    ]
    # As django-celery-beat sends the row's messages: options["expires"] = model.expires.
    with app.connection_for_read() as conn:
        channel: Any = conn.default_channel
        expiries = []
        while (message := channel.basic_get(QUEUE, no_ack=True)) is not None:
            expiries.append(message.headers["expires"])
    assert expiries == [expires.isoformat()] * 2


def test_a_run_past_its_jobs_expiry_does_not_run_and_the_job_is_paused_visibly(
    tmp_path: Path,
    redis_broker: redis.Redis,
    admin_client: Client,
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = tmp_path / "seen.log"
    entry = _entry("expired", args=json.dumps([str(log)]), expires=timezone.now() + timedelta(1))
    adoption.adopt()
    job = Job.objects.get(name="expired")
    assert serializers.next_slot(job, timezone.now()) is not None
    # The row's expiry passes with a run's message still queued (a worker busy until then).
    PeriodicTask.objects.filter(pk=entry.pk).update(expires=timezone.now() - timedelta(seconds=1))
    adoption.sync([job.pk])
    job.refresh_from_db()
    run = JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.MANUAL)
    messages.publish(job, run.pk, run.scheduled_for)
    assert _execute_queued() == 1
    assert not log.exists()  # the worker dropped the expired message, as under stock beat
    assert serializers.next_slot(job, timezone.now()) is None
    page = admin_client.get("/admin/jobs/job/").content.decode()
    assert "none: expired" in page

    with caplog.at_level("WARNING"):
        maintenance.run_pass(holder="tests", republish_after=10)
    run.refresh_from_db()
    assert run.status == "missed" and "before its job expired at" in run.error
    # Paused as django-celery-beat disables an expired row: audited, logged, on its row too.
    job.refresh_from_db()
    entry.refresh_from_db()
    assert not job.enabled and not entry.enabled
    pause = AuditEntry.objects.get(job=job, action=AuditAction.PAUSE)
    assert (pause.actor, pause.after) == ("code:expiry", paused("code:expiry"))
    assert any(getattr(r, "action", "") == "expired" for r in caplog.records)


def test_a_row_with_both_expiries_is_refused_as_django_celery_beat_refuses_it() -> None:
    entry = _entry("both", expire_seconds=60)
    PeriodicTask.objects.filter(pk=entry.pk).update(expires=timezone.now())
    [verdict] = adoption.adopt()
    assert "both 'expires' and 'expire_seconds'" in verdict.reason


# --- one_off -------------------------------------------------------------------------------


def test_a_one_off_row_runs_its_first_slot_once_across_beats_then_is_paused(
    tmp_path: Path, redis_broker: redis.Redis, clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "seen.log"
    # The first slot 10 to 20 s in the past: the resume below comes after it whenever the
    # test runs (a resume before it, by the database's clock, would owe that very slot again,
    # already on record).
    past = timezone.now() - timedelta(seconds=20)
    clock.now = past.replace(second=past.second - past.second % 10, microsecond=0)
    entry = _entry("once", args=json.dumps([str(log)]), one_off=True)
    beats = [_beat(clock), _beat(clock)]
    job = Job.objects.get(name="once")
    assert job.one_off and job.enabled
    first = clock.now + timedelta(seconds=10)
    stale = beats[1]._entries[job.pk]  # as the second beat holds it before any slot
    with caplog.at_level("INFO", logger="jobs.beat.retiring"):
        for step in range(1, 5):
            for beat in beats:
                beat.tick_at(clock.now + timedelta(seconds=10 * step, milliseconds=5))
    # A beat that has not heard of the pause yet (stalled) fires a later slot: nothing.
    beats[1]._record([(stale, first + timedelta(seconds=30))], [])
    assert list(JobRun.objects.filter(job=job).values_list("scheduled_for", flat=True)) == [first]
    assert _execute_queued() == 1 and len(_seen(log)) == 1
    job.refresh_from_db()
    entry.refresh_from_db()
    assert not job.enabled and not entry.enabled  # as django-celery-beat leaves its row
    [pause] = AuditEntry.objects.filter(job=job, action=AuditAction.PAUSE)
    assert pause.actor == "code:one_off"
    [done] = [r for r in caplog.records if getattr(r, "action", "") == "one_off_done"]
    assert "one_off job once had its slot" in done.getMessage()
    # Resumed, it runs its first slot from then on once more (django-celery-beat's re-enabled
    # one_off row runs once more too).
    services.resume("once", actor=TESTS)
    beat = _beat(VirtualClock(timezone.now()))
    for _ in range(3):
        beat.tick_at(timezone.now() + timedelta(seconds=11))
    assert JobRun.objects.filter(job=job).count() == 2
    assert not Job.objects.get(pk=job.pk).enabled


def test_beats_racing_on_a_one_off_jobs_slots_record_one(clock: VirtualClock) -> None:
    _entry("race", args='["/dev/null"]', one_off=True)
    adoption.adopt()
    job = Job.objects.get(name="race")
    start = threading.Barrier(4)

    def fire(slot: datetime) -> None:
        try:
            start.wait()
            retiring.record_one_off_slot(job.pk, slot, "")
        finally:
            connection.close()

    slots = [clock.now + timedelta(seconds=10 * n) for n in (1, 1, 2, 3)]
    threads = [threading.Thread(target=fire, args=(slot,)) for slot in slots]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert JobRun.objects.filter(job=job).count() == 1
    assert AuditEntry.objects.filter(job=job, action=AuditAction.PAUSE).count() == 1
    assert not Job.objects.get(pk=job.pk).enabled


def test_a_clocked_one_off_row_is_once_by_its_schedule() -> None:
    clocked = ClockedSchedule.objects.create(clocked_time=timezone.now() + timedelta(hours=1))
    entry = _entry("at noon", args='["/dev/null"]', clocked=clocked, interval=None, one_off=True)
    adoption.adopt()
    job = Job.objects.select_related("periodic_task").get(name="at noon")
    assert not job.one_off
    entries.refresh(job)  # the row stays what django-celery-beat requires of a clocked one
    entry.refresh_from_db()
    assert entry.one_off and adoption.sync([job.pk]) == {}


# --- disabled rows, one task in several rows ------------------------------------------------


def test_a_disabled_row_becomes_a_paused_job_that_its_page_can_resume(
    tmp_path: Path, redis_broker: redis.Redis, clock: VirtualClock, admin_client: Client
) -> None:
    log = tmp_path / "seen.log"
    entry = _entry("dormant", task=APPEND, args=json.dumps([str(log)]), enabled=False)
    _entry("gone", task="billing.gone", enabled=False)  # would not run either way
    beat = _beat(clock)
    job = Job.objects.get(name="dormant")
    assert job.adopted and not job.enabled and job.pk not in beat._entries
    for step in range(1, 4):
        beat.tick_at(clock.now + timedelta(seconds=10 * step, milliseconds=5))
    assert not JobRun.objects.filter(job=job).exists()
    entry.refresh_from_db()
    assert not entry.enabled
    # Not adoptable and disabled: left as it is, without a warning on every page.
    response = admin_client.get("/admin/jobs/job/")
    assert not [str(message) for message in response.context["messages"]]
    assert [v.name for v in adoption.preview() if not v.adoptable] == ["gone"]
    out = io.StringIO()
    call_command("jobs", "adopt", "--dry-run", stdout=out)
    assert out.getvalue().startswith(
        "gone (billing.gone), from the django-celery-beat row:\n"
        "  cannot be carried over, would not run: its task 'billing.gone'"
    )

    response = admin_client.post(
        "/admin/jobs/job/", {"action": "resume", "_selected_action": job.pk}
    )
    assert response.status_code == 302
    entry.refresh_from_db()
    assert entry.enabled  # the row follows its job


def test_one_task_in_several_rows_becomes_several_jobs_each_with_its_arguments(
    tmp_path: Path, redis_broker: redis.Redis, clock: VirtualClock
) -> None:
    log = tmp_path / "runs.log"
    for city in ("paris", "tokyo", "lima"):
        _entry(f"weather {city}", task=APPEND, args=json.dumps([str(log)]),
               kwargs=json.dumps({"note": city}))  # fmt: skip
    beat = _beat(clock)
    jobs = Job.objects.filter(task=APPEND).order_by("name")
    assert [(job.name, job.kwargs) for job in jobs] == [
        ("weather lima", {"note": "lima"}),
        ("weather paris", {"note": "paris"}),
        ("weather tokyo", {"note": "tokyo"}),
    ]
    beat.tick_at(clock.now + timedelta(seconds=10, milliseconds=5))
    assert _execute_queued() == 3
    assert sorted(line.split()[0] for line in log.read_text().splitlines()) == [
        "lima",
        "paris",
        "tokyo",
    ]
    assert set(JobRun.objects.values_list("status", flat=True)) == {"succeeded"}


def test_what_a_row_carries_is_shown_by_the_admin_the_api_and_jobs_show(
    admin_client: Client, insider: Client
) -> None:
    expires = timezone.now().replace(microsecond=0) + timedelta(days=1)
    headers = '{"tenant": "acme"}'
    _entry("shown", args='["/dev/null"]', headers=headers, expires=expires, one_off=True)
    adoption.adopt()
    job = Job.objects.get(name="shown")
    record = insider.get("/api/jobs/shown").json()
    assert (record["headers"], record["one_off"]) == ({"tenant": "acme"}, True)
    assert datetime.fromisoformat(record["expires_at"]) == expires
    out = io.StringIO()
    call_command("jobs", "show", "shown", "--json", stdout=out)
    shown = json.loads(out.getvalue())
    assert (shown["headers"], shown["expires_at"], shown["one_off"]) == (
        {"tenant": "acme"},
        expires.isoformat(),
        True,
    )
    page = admin_client.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    assert "acme" in page and "One off" in page and "Expires at" in page
