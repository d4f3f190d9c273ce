"""Lossless adoption, acceptance: a project that declares its periodic tasks in all three places
Celery projects use (``tests/support/declared_project``: a ``CELERY_BEAT_SCHEDULE`` dict with
``expires`` and ``headers`` options, ``add_periodic_task`` in ``on_after_configure`` and
``on_after_finalize`` handlers, named and unnamed; django-celery-beat rows in
``America/Los_Angeles``, one disabled, one task twice with different kwargs) switches to the
cluster scheduler. The pre-switch report lists each entry; two beats and two workers run every
slot of every entry once, none missing, counted on the task's own side; then a release that
removes one entry is rolled out beat by beat, with an old release's beat restarting in the
middle: the removed entry stops, the job never flaps back, and no slot runs twice."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import zoneinfo
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from jobs.beat.entries import schedule_of
from jobs.models import AuditEntry, Configured, Job, JobRun, RunStatus
from jobs.schedule import slots
from jobs.values.names import job_name_for
from tests.acceptance.conftest import ROOT, Cluster, pause_and_wait_for_beats, wait_for
from tests.support.slot_history import count_notes, wait_runs_finished

pytestmark = pytest.mark.acceptance

START_TIMEOUT = 90
APPEND = "tests.support.plain_tasks.append"
SETTINGS = "tests.support.declared_project.settings"
APP = "tests.support.declared_project.celery_app"
MANAGE = "tests/support/declared_project/manage.py"
BEAT_ENV = {"JOBS_MAINTENANCE_INTERVAL": "0.5", "JOBS_REPUBLISH_AFTER": "2"}

# Each entry's note (the executions' first word) and the job it becomes.
CONFIGURED = {
    "Check all e-mail accounts": "mail",
    "update-exchange-rates": "rates",
    "flush-buffers": "flush",
    "legacy-cleanup": "legacy",
    "add every 3": "configure-named",
    "finalize minutely": "finalize-minutely",
}
UNNAMED = ("configure-unnamed", "finalize-unnamed")
ROWS = {"LA minutely": "la-minutely", "sync Paris": "sync-paris", "sync Lyon": "sync-lyon"}


def _rows(cluster: Cluster, log: Path) -> None:
    """django-celery-beat rows as its admin makes them: a crontab in Los Angeles, the same task
    twice with different kwargs, and a disabled row."""
    minutely = CrontabSchedule.objects.create(
        minute="*", hour="*", day_of_week="*", day_of_month="*", month_of_year="*",
        timezone=zoneinfo.ZoneInfo("America/Los_Angeles"),
    )  # fmt: skip
    every_2s, _ = IntervalSchedule.objects.get_or_create(every=2, period=IntervalSchedule.SECONDS)
    common = {"task": APPEND, "args": json.dumps([str(log)]), "queue": cluster.queue}
    PeriodicTask.objects.create(
        name="LA minutely", crontab=minutely, kwargs=json.dumps({"note": "la-minutely"}), **common
    )
    for city in ("Paris", "Lyon"):
        PeriodicTask.objects.create(
            name=f"sync {city}",
            interval=every_2s,
            kwargs=json.dumps({"note": f"sync-{city.lower()}"}),
            **common,
        )
    PeriodicTask.objects.create(
        name="switched off",
        interval=every_2s,
        kwargs=json.dumps({"note": "off"}),
        enabled=False,
        **common,
    )


def _report(cluster: Cluster) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, MANAGE, "jobs", "adopt", "--dry-run", "--json"],
        env=cluster.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    records: list[dict[str, Any]] = json.loads(done.stdout)
    return records


def _start_beat(cluster: Cluster, name: str, release: str) -> None:
    argv = [sys.executable, "-m", "celery", "-A", APP, "beat", "-l", "info"]
    cluster._start(name, argv, {**BEAT_ENV, "DECLARED_RELEASE": release})


def _loaded(cluster: Cluster, name: str) -> bool:
    return "beat loaded" in cluster.log_of(name)


def test_every_declared_schedule_runs_once_per_slot_and_a_removed_one_stops_without_flapping(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "executions.log"
    cluster.env.update(
        DJANGO_SETTINGS_MODULE=SETTINGS, DECLARED_LOG=str(log), DECLARED_QUEUE=cluster.queue
    )
    _rows(cluster, log)
    unnamed = {job_name_for(f"{APPEND}({str(log)!r}, {note!r})"): note for note in UNNAMED}
    expected = {**CONFIGURED, **unnamed, **ROWS}

    # The pre-switch report, entry by entry: nothing written.
    records = {record["name"]: record for record in _report(cluster)}
    assert not Job.objects.exists()
    for name in CONFIGURED:
        record = records[name]
        assert record["source"] == "celery configuration" and record["carried"], record
        assert record["job"] == name
    for key in (f"{APPEND}({str(log)!r}, {note!r})" for note in UNNAMED):
        assert records[key]["carried"] and records[key]["job"] == job_name_for(key)
        assert "/" not in records[key]["job"]
    for name in ROWS:
        assert records[name]["source"] == "django-celery-beat row" and records[name]["carried"]
    assert records["switched off"]["carried"]
    assert any("its job is paused" in change for change in records["switched off"]["changes"])
    for name in ("flush-buffers", "finalize minutely", "LA minutely"):
        # A crontab: the same slots as Celery's own crontab computes.
        assert records[name]["celery_next"] == records[name]["our_next"], records[name]
    for name in ("Check all e-mail accounts", "update-exchange-rates"):
        assert any("anchored" in change for change in records[name]["changes"])
    assert len(records) == len(expected) + 1

    cluster.start_worker("worker-1", env={"DJANGO_SETTINGS_MODULE": SETTINGS})
    cluster.start_worker("worker-2", env={"DJANGO_SETTINGS_MODULE": SETTINGS})

    # Ready before the first slots: a backlog handed to several pool processes at once would run
    # one job's slots concurrently, and the overlap policy would (rightly) skip one.
    def workers_ready() -> bool:
        return all(" ready." in cluster.log_of(w) for w in ("worker-1", "worker-2"))

    wait_for(workers_ready, START_TIMEOUT, "the workers ready", poll=0.2)
    _start_beat(cluster, "beat-a", "1")
    _start_beat(cluster, "beat-b", "1")

    def started() -> bool:
        beats = _loaded(cluster, "beat-a") and _loaded(cluster, "beat-b")
        workers = all(" ready." in cluster.log_of(w) for w in ("worker-1", "worker-2"))
        return beats and workers

    wait_for(started, timeout=START_TIMEOUT, what="beats loaded and workers ready", poll=0.5)
    assert set(Job.objects.values_list("name", flat=True)) == {*expected, "switched off"}
    assert not Job.objects.get(name="switched off").enabled  # a disabled row: a paused job
    for name in [*CONFIGURED, *unnamed]:
        job = Job.objects.get(name=name)
        assert job.configured == Configured.DECLARED and job.managed_by_code and job.enabled
    mail = Job.objects.get(name="Check all e-mail accounts")
    assert mail.start_deadline == 30 and mail.headers == {"team": "mail"}
    la = Job.objects.select_related("periodic_task__crontab").get(name="LA minutely")
    assert la.periodic_task is not None and la.periodic_task.crontab is not None
    assert str(la.periodic_task.crontab.timezone) == "America/Los_Angeles"
    assert {Job.objects.get(name=f"sync {c}").kwargs["note"] for c in ("Paris", "Lyon")} == {
        "sync-paris",
        "sync-lyon",
    }

    # Past a minute boundary, so every crontab entry has a slot.
    boundary = (timezone.now() + timedelta(minutes=1)).replace(second=0, microsecond=0)
    wait_for(lambda: timezone.now() > boundary + timedelta(seconds=3), 90, "a minute boundary")

    # Release 2 (legacy-cleanup removed), rolled out beat by beat.
    cluster.kill("beat-a", 15)
    cluster.processes["beat-a"].wait(30)
    _start_beat(cluster, "beat-a2", "2")
    wait_for(lambda: _loaded(cluster, "beat-a2"), START_TIMEOUT, "release 2's first beat")
    legacy = Job.objects.get(name="legacy-cleanup")
    assert not legacy.enabled and legacy.configured == Configured.REMOVED
    removed_at = AuditEntry.objects.get(job_name="legacy-cleanup", action="pause").at
    # An old release's beat dies and comes back mid-deploy: it must not bring the entry back.
    cluster.kill("beat-b")
    cluster.processes["beat-b"].wait(30)
    _start_beat(cluster, "beat-b2", "1")
    wait_for(lambda: _loaded(cluster, "beat-b2"), START_TIMEOUT, "the old release's beat back")
    assert "Celery configuration not applied" in cluster.log_of("beat-b2")
    time.sleep(3)  # let slots pass with both releases running: the job must stay stopped
    legacy.refresh_from_db()
    assert not legacy.enabled
    cluster.kill("beat-b2", 15)
    cluster.processes["beat-b2"].wait(30)
    _start_beat(cluster, "beat-b3", "2")
    wait_for(lambda: _loaded(cluster, "beat-b3"), START_TIMEOUT, "release 2's second beat")
    time.sleep(2)

    live = [name for name in expected if name != "legacy-cleanup"]
    pause_and_wait_for_beats(cluster, ["beat-a2", "beat-b3"], live)
    jobs = list(Job.objects.filter(name__in=expected))

    wait_runs_finished(jobs, timeout=60, what="every run finished")
    executions = count_notes(log)
    # The job was never switched back on: one pause, no resume, by the configuration.
    assert AuditEntry.objects.filter(job_name="legacy-cleanup", action="resume").count() == 0
    assert AuditEntry.objects.filter(job_name="legacy-cleanup", action="pause").count() == 1
    for job in jobs:
        runs = list(JobRun.objects.filter(job=job).order_by("scheduled_for"))
        slot_times = [run.scheduled_for for run in runs]
        assert slot_times, f"{job.name}: no run"
        # None missing: every slot of the schedule from the first run to the last.
        schedule = schedule_of(job.periodic_task)
        assert schedule is not None
        assert slot_times == _slots_between(schedule, slot_times[0], slot_times[-1]), job.name
        assert {run.status for run in runs} == {RunStatus.SUCCEEDED}, job.name
        # Once each, on the task's own side.
        assert executions[expected[job.name]] == len(runs), job.name
    for name in ("flush-buffers", "finalize minutely", "LA minutely"):
        assert JobRun.objects.filter(job__name=name, scheduled_for=boundary).exists(), name
    # The removed entry stopped: no slot after its removal (give a beat's pickup delay).
    last_legacy = JobRun.objects.filter(job=legacy).order_by("-scheduled_for").first()
    assert last_legacy is not None
    assert last_legacy.scheduled_for <= removed_at + timedelta(seconds=1)
    assert executions["off"] == 0
    assert not JobRun.objects.filter(job__name="switched off").exists()


def _slots_between(schedule: Any, first: datetime, last: datetime) -> list[datetime]:
    found = [first]
    while True:
        following = slots.next_slot(schedule, found[-1])
        if following is None or following > last:
            return found
        found.append(following)
