"""Schedules declared in Celery's configuration (``beat_schedule`` / ``CELERY_BEAT_SCHEDULE`` /
``add_periodic_task``) become jobs (``jobs.beat.configured``), on real PostgreSQL: every schedule
kind and option Celery accepts there, the keys Celery gives unnamed entries, what cannot be
carried (never silent), removal, an operator's edit, and which configuration wins while beats of
two releases run side by side."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery import schedules
from django.db import connection
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from jobs import services
from jobs.audit import Actor
from jobs.beat import configured
from jobs.beat.entries import schedule_of
from jobs.models import AuditEntry, BeatHeartbeat, CeleryConfiguration, Configured, Job
from jobs.schedule.kinds import Cron, Every, Solar
from jobs.values.names import job_name_for
from project.celery import app

# Every test starts from an empty beat_schedule (the conftest fixture), restored after it.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("beat_schedule")]

APPEND = "tests.support.plain_tasks.append"
LOG = "/tmp/never-written"


class Beat:
    """A beat's configuration side with a heartbeat row of its own (no Celery beat process)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.configuration = ""

    def write(self) -> None:
        BeatHeartbeat.objects.update_or_create(
            name=self.name,
            defaults={
                "host": "test",
                "pid": 1,
                "started_at": timezone.now(),
                "last_seen": timezone.now(),
                "configuration": self.configuration,
            },
        )


def _start(name: str) -> tuple[configured.BeatConfiguration, configured.Outcome]:
    side = configured.BeatConfiguration(Beat(name))
    return side, side.start(app)


def test_every_schedule_kind_and_option_of_a_beat_schedule_becomes_a_job(
    beat_schedule: dict[str, Any],
) -> None:
    expires_at = datetime(2031, 1, 1, tzinfo=UTC)
    beat_schedule.update(
        {
            "seconds": {"task": APPEND, "schedule": 30.0, "args": (LOG,)},
            "a timedelta": {"task": APPEND, "schedule": timedelta(minutes=5), "args": [LOG]},
            "relative hourly": {
                "task": APPEND,
                "schedule": schedules.schedule(timedelta(minutes=90), relative=True),
                "args": [LOG],
            },
            "nightly": {
                "task": APPEND,
                "schedule": schedules.crontab(minute=30, hour="2", day_of_week="mon-fri"),
                "kwargs": {"log": LOG, "note": "nightly"},
                "options": {
                    "queue": "imports",
                    "exchange": "imports-x",
                    "routing_key": "imports.nightly",
                    "priority": 5,
                    "expires": 120,
                    "headers": {"team": "data"},
                },
            },
            "at sunrise": {
                "task": APPEND,
                "schedule": schedules.solar("sunrise", 48.85, 2.35),
                "args": [LOG],
                "options": {"expires": expires_at},
            },
        }
    )
    _, outcome = _start("beat-a")
    assert outcome.applied
    jobs = {job.name: job for job in Job.objects.select_related("periodic_task__crontab")}
    assert {name for name, job in jobs.items() if job.configured == Configured.DECLARED} >= {
        "seconds",
        "a timedelta",
        "relative hourly",
        "nightly",
    }
    for name in ("seconds", "a timedelta", "relative hourly", "nightly"):
        job = jobs[name]
        assert job.adopted and job.managed_by_code and job.enabled and job.task == APPEND
    assert schedule_of(jobs["seconds"].periodic_task) == Every(30)
    assert schedule_of(jobs["a timedelta"].periodic_task) == Every(300)
    # relative=True rounds each due time down to the hour: every hour, on the hour.
    relative = schedule_of(jobs["relative hourly"].periodic_task)
    assert isinstance(relative, Every) and relative.seconds == 3600
    assert relative.anchor is not None and relative.anchor.minute == 0
    nightly = jobs["nightly"]
    assert schedule_of(nightly.periodic_task) == Cron("30 2 * * mon-fri", "UTC")
    assert (nightly.queue, nightly.exchange, nightly.routing_key, nightly.priority) == (
        "imports",
        "imports-x",
        "imports.nightly",
        5,
    )
    assert nightly.kwargs == {"log": LOG, "note": "nightly"}
    assert nightly.start_deadline == 120  # expires (seconds after sending) is the start deadline
    assert nightly.periodic_task is not None
    assert json.loads(nightly.periodic_task.headers) == {"team": "data"}
    solar_row = PeriodicTask.objects.get(name="at sunrise")
    assert schedule_of(solar_row) == Solar("sunrise", 48.85, 2.35)
    assert solar_row.expires == expires_at
    assert Job.objects.get(name="at sunrise").expires_at == expires_at
    assert nightly.headers == {"team": "data"}


def test_a_crontab_is_read_in_celerys_time_zone_or_its_nowfun(
    beat_schedule: dict[str, Any], settings: Any
) -> None:
    import zoneinfo

    paris = zoneinfo.ZoneInfo("Europe/Paris")
    beat_schedule["app zone"] = {
        "task": APPEND,
        "schedule": schedules.crontab(minute=0, hour=9),
        "args": [LOG],
    }
    beat_schedule["own zone"] = {
        "task": APPEND,
        "schedule": schedules.crontab(
            minute=0, hour=9, nowfun=lambda: datetime.now(zoneinfo.ZoneInfo("Asia/Tokyo"))
        ),
        "args": [LOG],
    }
    conf: Any = app.conf
    saved = conf.timezone
    conf.timezone = "America/Los_Angeles"
    try:
        entries = {entry.key: entry for entry in configured.declared(app)}
    finally:
        conf.timezone = saved
    assert str(entries["app zone"].values["crontab"].timezone) == "America/Los_Angeles"
    assert str(entries["own zone"].values["crontab"].timezone) == "Asia/Tokyo"
    assert paris  # a zone object, not only names, is what nowfun returns


def test_unnamed_add_periodic_task_entries_get_celerys_key_and_the_last_one_wins(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first = app.add_periodic_task(60.0, app.signature(APPEND, args=(LOG,)))
    with caplog.at_level(logging.WARNING):
        again = app.add_periodic_task(120.0, app.signature(APPEND, args=(LOG,)))
    named = app.add_periodic_task(
        schedules.crontab(minute="*/15"), app.signature(APPEND, args=(LOG, "q")), name="quarter"
    )
    assert first == again == f"{APPEND}('{LOG}')"
    assert "shadowed a previous unnamed periodic task" in caplog.text
    _start("beat-a")
    # The key's arguments hold a path: a job name cannot hold "/", so it holds U+2215.
    job = Job.objects.select_related("periodic_task").get(name=job_name_for(first))
    assert job.name == f"{APPEND}('\u2215tmp\u2215never-written')"
    assert schedule_of(job.periodic_task) == Every(120)  # the last one
    assert Job.objects.get(name=named).args == [LOG, "q"]


@contextlib.contextmanager
def logged(name: str) -> Iterator[list[str]]:
    """The lines logged to ``name`` within the block (the project's loggers do not propagate
    to pytest's capture)."""
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Collect()
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)


def test_what_cannot_be_carried_is_reported_and_the_rest_runs(
    beat_schedule: dict[str, Any],
) -> None:
    class EveryOtherCall(schedules.schedule):
        def is_due(self, last_run_at: datetime) -> Any:  # its own rule
            return super().is_due(last_run_at)

    beat_schedule.update(
        {
            "custom": {"task": APPEND, "schedule": EveryOtherCall(10), "args": [LOG]},
            "unknown task": {"task": "nowhere.to.be.found", "schedule": 10.0},
            "half a second": {"task": APPEND, "schedule": 0.5, "args": [LOG]},
            "fine": {"task": APPEND, "schedule": 10.0, "args": [LOG]},
        }
    )
    with logged("jobs.beat.configured") as lines:
        _, outcome = _start("beat-a")
    reasons = {entry.key: entry.reason for entry in outcome.not_carried}
    assert "schedule class with its own is_due" in reasons["custom"]
    assert "0.5 s is not a whole number of seconds" in reasons["half a second"]
    for key in reasons:
        assert any(f"entry {key!r}" in line and "does not run" in line for line in lines)
    assert Job.objects.filter(name="fine", configured=Configured.DECLARED).exists()
    assert not Job.objects.filter(name__in=["custom", "half a second"]).exists()
    assert "is not registered here" in reasons["unknown task"]
    assert not Job.objects.filter(name="unknown task").exists()


def test_an_entry_removed_from_the_code_is_disabled_audited_and_back_when_it_returns(
    beat_schedule: dict[str, Any],
) -> None:
    beat_schedule["hourly"] = {"task": APPEND, "schedule": 3600.0, "args": [LOG]}
    beat_schedule["kept"] = {"task": APPEND, "schedule": 60.0, "args": [LOG]}
    _start("beat-a")
    del beat_schedule["hourly"]
    _, outcome = _start("beat-b")
    assert outcome.removed == ["hourly"]
    job = Job.objects.get(name="hourly")
    assert not job.enabled and job.configured == Configured.REMOVED
    assert not PeriodicTask.objects.get(name="hourly").enabled
    assert AuditEntry.objects.filter(job_name="hourly", action="pause").count() == 1
    assert Job.objects.get(name="kept").enabled
    # Back in the code: the same configuration as the first one, which reads as a rollback, so
    # it applies once no live beat holds the newer one (beat-b's release is gone).
    BeatHeartbeat.objects.all().delete()
    beat_schedule["hourly"] = {"task": APPEND, "schedule": 3600.0, "args": [LOG]}
    _start("beat-c")
    job.refresh_from_db()
    assert job.enabled and job.configured == Configured.DECLARED


def test_an_edit_in_the_code_updates_the_job_until_an_operator_edits_it(
    beat_schedule: dict[str, Any],
) -> None:
    beat_schedule["report"] = {"task": APPEND, "schedule": 3600.0, "args": [LOG]}
    _start("beat-a")
    beat_schedule["report"] = {"task": APPEND, "schedule": 1800.0, "args": [LOG, "v2"]}
    _start("beat-b")
    job = Job.objects.select_related("periodic_task__interval").get(name="report")
    assert schedule_of(job.periodic_task) == Every(1800) and job.args == [LOG, "v2"]
    # An operator's edit (here through the service every edge uses, as the admin form does).
    job.managed_by_code = False
    job.args = [LOG, "operator"]
    services.save_job(job, Every(900), actor=Actor.code("operator"))
    beat_schedule["report"] = {"task": APPEND, "schedule": 600.0, "args": [LOG, "v3"]}
    _start("beat-c")
    job = Job.objects.select_related("periodic_task__interval").get(name="report")
    assert schedule_of(job.periodic_task) == Every(900) and job.args == [LOG, "operator"]
    # Removed from the code, the operator's job keeps running: it is theirs.
    del beat_schedule["report"]
    _start("beat-d")
    job.refresh_from_db()
    assert job.enabled


def test_beats_of_an_old_and_a_new_release_side_by_side_never_flap(
    beat_schedule: dict[str, Any],
) -> None:
    old = {"task": APPEND, "schedule": 3600.0, "args": [LOG, "old"]}
    new = {"task": APPEND, "schedule": 3600.0, "args": [LOG, "new"]}
    beat_schedule["report"] = old
    old_beat, _ = _start("old-1")
    beat_schedule["report"] = new
    new_beat, applied = _start("new-1")
    assert applied.applied
    assert Job.objects.get(name="report").args == [LOG, "new"]
    # An old release's beat restarts mid-deploy: its configuration is older and a live beat holds
    # the newer one, so nothing is applied.
    beat_schedule["report"] = old
    restarted, outcome = _start("old-2")
    assert not outcome.applied and "older than" in outcome.why_not
    assert Job.objects.get(name="report").args == [LOG, "new"]
    # Its periodic look changes nothing either while the new beat lives.
    restarted._next_check = 0.0
    restarted.recheck()
    assert Job.objects.get(name="report").args == [LOG, "new"]
    # A rollback: every beat holding the newer configuration is gone; the old one is applied.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE jobs_beatheartbeat SET last_seen = now() - interval '1 hour' "
            "WHERE configuration = %s",
            [new_beat.fingerprint],
        )
    restarted._next_check = 0.0
    restarted.recheck()
    assert Job.objects.get(name="report").args == [LOG, "old"]
    latest = CeleryConfiguration.objects.order_by("-applied_at", "-id").first()
    assert latest is not None and latest.fingerprint == old_beat.fingerprint


def test_a_stock_django_celery_beat_row_of_a_configured_entry_is_taken_over(
    beat_schedule: dict[str, Any],
) -> None:
    # What stock django-celery-beat left before the switch: a row named after the entry, which
    # adoption made a job; the configuration owns it from now on.
    beat_schedule["cleanup"] = {"task": APPEND, "schedule": 3600.0, "args": [LOG]}
    configured._write_row(configured.declared(app)[0])
    from jobs.beat import adoption

    adoption.adopt()
    assert Job.objects.get(name="cleanup").configured == Configured.NO
    beat_schedule["cleanup"] = {"task": APPEND, "schedule": 600.0, "args": [LOG]}
    _start("beat-a")
    job = Job.objects.select_related("periodic_task__interval").get(name="cleanup")
    assert job.configured == Configured.DECLARED and job.managed_by_code
    assert schedule_of(job.periodic_task) == Every(600)
    assert Job.objects.filter(name="cleanup").count() == 1


def test_celerys_backend_cleanup_entry_follows_celerys_own_rule(
    beat_schedule: dict[str, Any],
) -> None:
    conf: Any = app.conf
    saved = conf.result_expires
    try:
        # This project keeps no results (CELERY_RESULT_EXPIRES = None): no entry.
        assert "celery.backend_cleanup" not in configured.celery_entries(app)
        # Results that expire on a backend that does not expire them itself: Celery's beat
        # installs the nightly cleanup at 4:00, its messages expiring after 12 hours.
        conf.result_expires = timedelta(days=1)
        assert not app.backend.supports_autoexpire
        entry = configured.celery_entries(app)["celery.backend_cleanup"]
        assert entry["schedule"] == schedules.crontab("0", "4", "*")
        assert entry["options"] == {"expires": 12 * 3600}
        [declared] = [d for d in configured.declared(app) if d.key == "celery.backend_cleanup"]
        assert declared.carried and declared.values["expire_seconds"] == 12 * 3600
        # A key of the project's own with that name wins, as in Celery.
        beat_schedule["celery.backend_cleanup"] = {
            "task": "celery.backend_cleanup",
            "schedule": schedules.crontab("30", "5", "*"),
        }
        assert configured.celery_entries(app)["celery.backend_cleanup"]["schedule"] == (
            schedules.crontab("30", "5", "*")
        )
    finally:
        conf.result_expires = saved


def test_a_paused_job_removed_from_the_code_and_back_stays_paused(
    beat_schedule: dict[str, Any],
) -> None:
    beat_schedule["hourly"] = {"task": APPEND, "schedule": 3600.0, "args": [LOG]}
    _start("beat-a")
    services.pause("hourly", actor=Actor.code("operator"))  # pausing is not an edit
    del beat_schedule["hourly"]
    BeatHeartbeat.objects.all().delete()
    _, outcome = _start("beat-b")
    assert outcome.applied and outcome.removed == []
    BeatHeartbeat.objects.all().delete()
    beat_schedule["hourly"] = {"task": APPEND, "schedule": 1800.0, "args": [LOG]}
    _start("beat-c")
    job = Job.objects.select_related("periodic_task__interval").get(name="hourly")
    assert not job.enabled and job.configured == Configured.DECLARED and job.managed_by_code
    assert schedule_of(job.periodic_task) == Every(1800)
    assert not AuditEntry.objects.filter(job_name="hourly", action="resume").exists()
