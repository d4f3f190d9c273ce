"""History retention on a real database: per-status ages, batches, what is never deleted, the
rollup that keeps metrics monotonic, `jobs prune`, and the settings that configure it."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from jobs.conf import get_ops_conf
from jobs.models import BeatHeartbeat, Job, JobRun, RunRollup, RunStatus
from jobs.upkeep import retention, rollups

pytestmark = pytest.mark.django_db

DAY = timedelta(days=1)


def _run(job: Job, status: RunStatus, age: timedelta, **fields: object) -> JobRun:
    return JobRun.objects.create(
        job=job, scheduled_for=timezone.now() - age, status=status, **fields
    )


def test_each_status_is_kept_for_its_own_age(make_job: Callable[..., Job]) -> None:
    job = make_job("report")
    old_success = _run(job, RunStatus.SUCCEEDED, 10 * DAY)
    new_success = _run(job, RunStatus.SUCCEEDED, 2 * DAY)
    old_failure = _run(job, RunStatus.FAILED, 10 * DAY)
    ancient_failure = _run(job, RunStatus.FAILED, 40 * DAY)
    # Never pruned, however old: they are not finished.
    stuck = _run(job, RunStatus.RUNNING, 400 * DAY)
    waiting = _run(job, RunStatus.SCHEDULED, 400 * DAY)

    result = retention.prune()  # the defaults: succeeded 7 days, failed 30 days

    left = set(JobRun.objects.values_list("id", flat=True))
    assert left == {new_success.pk, old_failure.pk, stuck.pk, waiting.pk}
    assert old_success.pk not in left and ancient_failure.pk not in left
    assert result.deleted["succeeded"] == 1 and result.deleted["failed"] == 1
    assert result.total == 2


def test_forever_keeps_everything(make_job: Callable[..., Job]) -> None:
    job = make_job("report")
    _run(job, RunStatus.LOST, 1000 * DAY)

    result = retention.prune(retention={"lost": None})

    assert result.total == 0 and JobRun.objects.count() == 1


def test_batches_and_dry_run(make_job: Callable[..., Job]) -> None:
    job = make_job("report")
    start = timezone.now() - 30 * DAY
    JobRun.objects.bulk_create(
        JobRun(job=job, scheduled_for=start + timedelta(minutes=i), status=RunStatus.SUCCEEDED)
        for i in range(25)
    )

    counted = retention.prune(dry_run=True, batch_size=10)
    assert counted.deleted["succeeded"] == 25 and JobRun.objects.count() == 25

    deleted = retention.prune(batch_size=10)
    assert deleted.deleted["succeeded"] == 25 and not JobRun.objects.exists()
    rollup = RunRollup.objects.get(job=job, status=RunStatus.SUCCEEDED)
    assert rollup.count == 25


def test_a_retry_outlives_the_run_it_retried(make_job: Callable[..., Job]) -> None:
    job = make_job("report")
    original = _run(job, RunStatus.LOST, 40 * DAY)
    retry = _run(job, RunStatus.RUNNING, 40 * DAY, retry_of=original)

    retention.prune()

    retry.refresh_from_db()
    assert retry.retry_of is None


def test_the_rollup_adds_up_what_was_deleted(make_job: Callable[..., Job]) -> None:
    job = make_job("report")
    now = timezone.now()
    for minutes, lag in enumerate((0.02, 0.3, 20)):
        slot = now - 40 * DAY + timedelta(minutes=minutes)
        JobRun.objects.create(
            job=job,
            scheduled_for=slot,
            status=RunStatus.FAILED,
            started_at=slot + timedelta(seconds=lag),
            finished_at=slot + timedelta(seconds=lag + 1),
        )
    before = {(s.job_id, s.status): s for s in rollups.totals()}

    retention.prune()
    retention.prune()  # nothing left to add: the totals stay

    after = {(s.job_id, s.status): s for s in rollups.totals()}
    key = (job.pk, RunStatus.FAILED)
    assert after[key].count == before[key].count == 3
    assert after[key].lag.buckets == before[key].lag.buckets
    assert after[key].lag.total == pytest.approx(before[key].lag.total)
    assert after[key].duration.buckets == before[key].duration.buckets


def test_heartbeats_of_long_gone_beats_go_too() -> None:
    now = timezone.now()
    for name, age in (("gone:1", 2 * DAY), ("live:2", timedelta(seconds=1))):
        BeatHeartbeat.objects.create(
            name=name, host="h", pid=1, started_at=now - age, last_seen=now - age
        )

    result = retention.prune()

    assert result.beat_heartbeats == 1
    assert list(BeatHeartbeat.objects.values_list("name", flat=True)) == ["live:2"]


def test_prune_if_due_runs_once_per_interval(
    make_job: Callable[..., Job], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retention, "_last_prune", None)
    job = make_job("report")
    _run(job, RunStatus.SUCCEEDED, 10 * DAY)

    first = retention.prune_if_due()
    _run(job, RunStatus.SUCCEEDED, 10 * DAY)
    second = retention.prune_if_due()

    assert first is not None and first.total == 1
    assert second is None and JobRun.objects.count() == 1


def test_jobs_prune_cli(make_job: Callable[..., Job]) -> None:
    job = make_job("report")
    _run(job, RunStatus.SUCCEEDED, 10 * DAY)
    _run(job, RunStatus.MISSED, 40 * DAY)

    dry = io.StringIO()
    call_command("jobs", "prune", "--dry-run", "--json", stdout=dry)
    report = json.loads(dry.getvalue())
    assert report["dry_run"] is True
    assert (report["deleted"]["succeeded"], report["deleted"]["missed"]) == (1, 1)
    assert JobRun.objects.count() == 2

    out = io.StringIO()
    call_command("jobs", "prune", stdout=out)
    assert "deleted 2 run(s) in all" in out.getvalue()
    assert "succeeded: deleted 1 run(s) with a slot before" in out.getvalue()
    assert not JobRun.objects.exists()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("soon", "JOBS_RETENTION_SUCCEEDED='soon'"),
        ("-5d", "must be positive"),
    ],
)
def test_a_bad_retention_setting_names_the_variable(value: str, message: str) -> None:
    retention_settings = {**get_ops_conf_defaults(), "succeeded": value}
    with override_settings(JOBS_RETENTION=retention_settings):
        get_ops_conf.cache_clear()
        try:
            with pytest.raises(ImproperlyConfigured, match=message):
                get_ops_conf()
        finally:
            get_ops_conf.cache_clear()


def get_ops_conf_defaults() -> dict[str, str]:
    from django.conf import settings

    return dict(settings.JOBS_RETENTION)


def test_retention_settings_are_read_as_durations() -> None:
    with override_settings(JOBS_RETENTION={"succeeded": "12h", "lost": "forever"}):
        get_ops_conf.cache_clear()
        try:
            conf = get_ops_conf()
        finally:
            get_ops_conf.cache_clear()
    assert conf.retention["succeeded"] == timedelta(hours=12)
    assert conf.retention["lost"] is None
    # A status the setting leaves out keeps its default (a project may set only some).
    assert conf.retention["failed"] == timedelta(days=30)


def _vacuum_count() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'jobs_jobrun'")
        return int(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_a_pass_that_deleted_runs_vacuums_the_run_table(make_job: Callable[..., Job]) -> None:
    """So that a steady stream of runs keeps the table's size whatever autovacuum does
    (bench/retention_bench.py); not when set off, nor inside a transaction (where VACUUM
    cannot run), nor after a pass that deleted nothing."""
    job = make_job("pruned")
    _run(job, RunStatus.SUCCEEDED, 40 * DAY)
    before = _vacuum_count()
    assert retention.prune().vacuumed is True
    assert _vacuum_count() == before + 1

    assert retention.prune().vacuumed is False  # nothing deleted
    _run(job, RunStatus.SUCCEEDED, 40 * DAY)
    with override_settings(JOBS_RETENTION_VACUUM=False):
        get_ops_conf.cache_clear()
        try:
            result = retention.prune()
        finally:
            get_ops_conf.cache_clear()
    assert result.total == 1 and result.vacuumed is False
    assert _vacuum_count() == before + 1


def test_inside_a_transaction_it_prunes_without_vacuuming(make_job: Callable[..., Job]) -> None:
    job = make_job("in-atomic")
    _run(job, RunStatus.SUCCEEDED, 40 * DAY)
    result = retention.prune()
    assert result.total == 1 and result.vacuumed is False
