"""No row takes the cluster down: schedule rows corrupted straight in the database while two
real beats and a worker run. The broken job shows its error and every other job keeps its slots;
it runs again within a second of being fixed. A message naming a task no worker has is recorded
failed, never executed, and the worker carries on."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from celery import current_app
from django.db import connection
from django.test import Client
from django.utils import timezone

from jobs.audit import Actor
from jobs.broker import messages
from jobs.models import Job, JobRun, RunStatus, ScheduleError
from jobs.web import tokens
from tests.acceptance.conftest import Cluster, wait_for
from tests.support.slot_history import (
    BEAT_ENV,
    assert_each_slot_once,
    count_executions,
    next_second,
    record_jobs,
    wait_settled,
    wait_started,
    wait_until,
)

pytestmark = pytest.mark.acceptance

BEATS = ("beat-a", "beat-b")


def _sql(statement: str, *params: int | str | None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(statement, list(params))
        return list(cursor.fetchall()) if cursor.description else []


def _point_at_crontab(job: Job, day_of_month: str, month: str, zone: str = "UTC") -> int:
    [(crontab_id,)] = _sql(
        "INSERT INTO django_celery_beat_crontabschedule"
        " (minute, hour, day_of_week, day_of_month, month_of_year, timezone)"
        " VALUES ('0', '0', '*', %s, %s, %s) RETURNING id",
        day_of_month,
        month,
        zone,
    )
    _sql(
        "UPDATE django_celery_beat_periodictask SET interval_id = NULL, crontab_id = %s"
        " WHERE id = %s",
        crontab_id,
        job.periodic_task_id,
    )
    return int(crontab_id)


def _error_seen(job: Job, words: str) -> bool:
    row = ScheduleError.objects.filter(job=job).first()
    return row is not None and words in row.error


def _slots_between(job: Job, start: datetime, end: datetime) -> list[JobRun]:
    return list(JobRun.objects.filter(job=job, scheduled_for__gt=start, scheduled_for__lte=end))


def _alive(cluster: Cluster, names: Iterable[str]) -> None:
    for name in names:
        assert cluster.processes[name].poll() is None, f"{name} exited:\n{cluster.log_of(name)}"


def test_corrupted_rows_leave_every_beat_up_and_every_other_job_on_time(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "executions.log"
    cluster.start_worker("worker")
    for beat in BEATS:
        cluster.start_beat(beat, env=BEAT_ENV)
    wait_started(cluster, BEATS, ["worker"])
    steady = record_jobs(cluster, log, [(f"steady-1-{n}", 1) for n in range(3)], overlap="allow")
    [victim, odd_kwargs] = record_jobs(cluster, log, [("victim-1-0", 1), ("odd-1-0", 1)])
    interval_id = victim.periodic_task.interval_id  # type: ignore[union-attr]
    secret = tokens.create("acceptance", actor=Actor.code("tests"))[1]
    bearer = {"authorization": f"Bearer {secret}"}
    start = next_second(timezone.now()) + timedelta(seconds=2)
    wait_until(start + timedelta(seconds=2))

    # 1. A cron that can never fire (31 February).
    broken_at = timezone.now()
    crontab_id = _point_at_crontab(victim, "31", "2")
    wait_for(lambda: _error_seen(victim, "never fires"), timeout=5, what="the error recorded")
    shown = cluster.manage("jobs", "show", victim.name)
    assert shown.returncode == 0 and "never fires" in shown.stdout, shown.stderr
    health = Client(headers=bearer).get("/healthz").json()["checks"]["schedules"]
    assert health["jobs"][0]["job"] == victim.name and "never fires" in health["jobs"][0]["error"]

    # 2. Then a time zone no library knows, on the same row.
    wait_until(broken_at + timedelta(seconds=3))
    _sql("UPDATE django_celery_beat_crontabschedule SET timezone = 'Nowhere/Zone' WHERE id = %s",
         crontab_id)  # fmt: skip
    wait_for(lambda: _error_seen(victim, "Nowhere/Zone"), timeout=5, what="the new error")

    # 3. NUL in kwargs: PostgreSQL keeps it out of the job's JSON; the beat entry's text
    # kwargs (django-celery-beat's) take it, and nothing reads them to schedule.
    with (
        pytest.raises(psycopg.errors.UntranslatableCharacter),
        psycopg.connect(cluster.env["DATABASE_URL"], autocommit=True) as raw,
    ):
        raw.execute("UPDATE jobs_job SET kwargs = '{\"a\": \"\\u0000\"}' WHERE id = %s",
                    [odd_kwargs.pk])  # fmt: skip
    _sql("UPDATE django_celery_beat_periodictask SET kwargs = %s WHERE id = %s",
         '{"job": "odd\\u0000", "x": [}', odd_kwargs.periodic_task_id)  # fmt: skip

    # 4. A message naming a task no worker has (an older beat, a hand-written row).
    stray = JobRun.objects.create(job=victim, scheduled_for=timezone.now())
    current_app.send_task(
        "os.system",
        kwargs={"run_id": stray.pk},
        task_id=messages.task_id_for(stray.pk),
        queue=cluster.queue,
    )

    # 5. Fixed: back to every second. It runs again within a second.
    wait_until(broken_at + timedelta(seconds=6))
    _sql(
        "UPDATE django_celery_beat_periodictask SET crontab_id = NULL, interval_id = %s"
        " WHERE id = %s",
        interval_id,
        victim.periodic_task_id,
    )
    fixed_at = timezone.now()
    wait_for(
        lambda: bool(_slots_between(victim, fixed_at, fixed_at + timedelta(minutes=1))),
        timeout=5,
        what="a run of the fixed job",
    )
    first_again = min(
        run.scheduled_for
        for run in _slots_between(victim, fixed_at, fixed_at + timedelta(minutes=1))
    )
    assert first_again - fixed_at <= timedelta(seconds=1.5)
    assert not ScheduleError.objects.filter(job=victim).exists()

    wait_until(fixed_at + timedelta(seconds=4))
    end = fixed_at + timedelta(seconds=3)
    _alive(cluster, [*BEATS, "worker"])
    wait_settled([*steady, odd_kwargs], start, end, seconds=60)
    executions = count_executions(log)
    for job in [*steady, odd_kwargs]:
        runs = assert_each_slot_once(job, start, end, executions, 1)
        assert {run.status for run in runs} == {RunStatus.SUCCEEDED}, job.name
    # While broken, the victim had no slot; the one the fix brought ran.
    assert not [
        run for run in _slots_between(victim, broken_at + timedelta(seconds=1), fixed_at)
        if run.pk != stray.pk
    ]  # fmt: skip
    stray.refresh_from_db()
    assert stray.status == RunStatus.FAILED and "'os.system' is not registered" in stray.error
    assert executions[stray.pk] == 0
    for beat in BEATS:
        assert "cannot be scheduled" in cluster.log_of(beat)
