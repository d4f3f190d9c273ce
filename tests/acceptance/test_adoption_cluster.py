"""Adoption acceptance: an existing project's django-celery-beat entries keep running under the
cluster scheduler with no step beyond switching it. Entries made through django-celery-beat's
models as its README shows (an interval; a crontab with a time zone) name a plain
``@shared_task``; two beats and a worker run them. Every slot runs once, counted on the task's
own side (a line per execution); an entry added and one edited while the beats run are picked
up within a second; an entry whose task is unknown is reported and the others keep running."""

from __future__ import annotations

import json
import time
import zoneinfo
from datetime import UTC, timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from jobs.models import Job, JobRun, RunStatus
from tests.acceptance.conftest import Cluster, pause_and_wait_for_beats, wait_for
from tests.support.slot_history import count_notes, wait_runs_finished

pytestmark = pytest.mark.acceptance

START_TIMEOUT = 90
BEAT_ENV = {"JOBS_MAINTENANCE_INTERVAL": "0.5", "JOBS_REPUBLISH_AFTER": "2"}
APPEND = "tests.support.plain_tasks.append"
PICKUP_SECONDS = 1.0


def _readme_entries(cluster: Cluster, log: Path) -> None:
    """The entries as django-celery-beat's README makes them (plus the test's queue)."""
    every_second, _ = IntervalSchedule.objects.get_or_create(
        every=1, period=IntervalSchedule.SECONDS
    )
    PeriodicTask.objects.create(
        interval=every_second,
        name="Importing contacts",
        task=APPEND,
        args=json.dumps([str(log)]),
        kwargs=json.dumps({"note": "contacts"}),
        queue=cluster.queue,
    )
    every_minute = CrontabSchedule.objects.create(
        minute="*",
        hour="*",
        day_of_week="*",
        day_of_month="*",
        month_of_year="*",
        timezone=zoneinfo.ZoneInfo("Canada/Pacific"),
    )
    PeriodicTask.objects.create(
        crontab=every_minute,
        name="Minutely report",
        task=APPEND,
        args=json.dumps([str(log)]),
        kwargs=json.dumps({"note": "report"}),
        queue=cluster.queue,
    )
    PeriodicTask.objects.create(
        interval=every_second, name="Gone task", task="billing.gone", queue=cluster.queue
    )


def _timed(condition: object, what: str) -> float:
    """Seconds until ``condition()`` holds (fails past 10 s)."""
    began = time.monotonic()
    wait_for(condition, timeout=10, what=what, poll=0.02)  # type: ignore[arg-type]
    return time.monotonic() - began


def test_existing_entries_run_once_per_slot_and_edits_are_picked_up_within_a_second(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "executions.log"
    _readme_entries(cluster, log)
    cluster.start_worker("worker")
    # Ready before the first slot: a backlog of two slots handed to two pool processes at once
    # would run concurrently, and the overlap policy would (rightly) skip one.
    wait_for(lambda: " ready." in cluster.log_of("worker"), START_TIMEOUT, "the worker ready")
    cluster.start_beat("beat-a", env=BEAT_ENV)
    cluster.start_beat("beat-b", env=BEAT_ENV)

    def started() -> bool:
        beats = all("beat loaded" in cluster.log_of(b) for b in ("beat-a", "beat-b"))
        return beats and " ready." in cluster.log_of("worker")

    wait_for(started, timeout=START_TIMEOUT, what="beats loaded and worker ready", poll=0.5)
    assert set(Job.objects.values_list("name", flat=True)) == {
        "Importing contacts",
        "Minutely report",
    }
    assert Job.objects.filter(adopted=True).count() == 2
    beat_logs = cluster.log_of("beat-a") + cluster.log_of("beat-b")
    assert "entry 'Gone task' cannot be adopted" in beat_logs
    assert "'billing.gone' is not registered" in beat_logs

    # Added and edited through django-celery-beat's models while the beats run.
    every_second = IntervalSchedule.objects.get(every=1, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.create(
        interval=every_second,
        name="Added later",
        task=APPEND,
        args=json.dumps([str(log)]),
        kwargs=json.dumps({"note": "added"}),
        queue=cluster.queue,
    )
    added_after = _timed(
        lambda: Job.objects.filter(name="Added later").exists(), "the new entry adopted"
    )
    PeriodicTask.objects.update_or_create(
        name="Importing contacts", defaults={"kwargs": json.dumps({"note": "contacts-v2"})}
    )
    edited_after = _timed(
        lambda: Job.objects.get(name="Importing contacts").kwargs == {"note": "contacts-v2"},
        "the edit reaching the job",
    )
    assert added_after <= PICKUP_SECONDS, f"the new entry was adopted after {added_after:.2f} s"
    assert edited_after <= PICKUP_SECONDS, f"the edit reached the job after {edited_after:.2f} s"
    first_v2 = _timed(lambda: "contacts-v2" in count_notes(log), "a run with the edit")
    assert first_v2 <= 3.0  # the next 1 s slot after the edit

    # Run past a minute boundary, so the crontab entry has a slot.
    boundary = (timezone.now() + timedelta(minutes=1)).replace(second=0, microsecond=0)
    wait_for(lambda: timezone.now() > boundary + timedelta(seconds=4), 90, "a minute boundary")
    jobs = list(Job.objects.filter(adopted=True))
    pause_and_wait_for_beats(cluster, ["beat-a", "beat-b"], [job.name for job in jobs])

    wait_runs_finished(jobs, timeout=60, what="every run of the adopted jobs finished")
    executions = count_notes(log)
    notes = {
        "Importing contacts": ("contacts", "contacts-v2"),
        "Added later": ("added",),
        "Minutely report": ("report",),
    }
    for job in jobs:
        runs = list(JobRun.objects.filter(job=job).order_by("scheduled_for"))
        slots = [run.scheduled_for for run in runs]
        step = timedelta(minutes=1) if job.name == "Minutely report" else timedelta(seconds=1)
        assert slots, f"{job.name}: no run"
        assert slots == [slots[0] + step * i for i in range(len(slots))], f"{job.name}: a gap"
        assert {run.status for run in runs} == {RunStatus.SUCCEEDED}, job.name
        assert sum(executions[note] for note in notes[job.name]) == len(runs), job.name
    report = JobRun.objects.filter(job__name="Minutely report")
    assert boundary in {run.scheduled_for.astimezone(UTC) for run in report}
    # (The edit may come before the entry's first slot: "contacts" may never have run.)
    assert executions["contacts-v2"] >= 5 and executions["added"] >= 5
    # The unknown task's entry stayed as it was, reported, never run.
    assert not Job.objects.filter(name="Gone task").exists()
    assert PeriodicTask.objects.get(name="Gone task").enabled
