"""The incidents found by looking (jobs.alerts.detect), against real PostgreSQL: runs running
long or too short against their job's duration baseline, the dead-man's switch of periodic
jobs, and a cluster without a live beat or node."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from django.utils import timezone

from jobs.alerts import baseline, detect
from jobs.conf import get_ops_conf
from jobs.database.database_clock import database_now
from jobs.models import (
    AlertDelivery,
    BeatHeartbeat,
    Blackout,
    Incident,
    Job,
    JobRun,
    Node,
    RunStatus,
    Trigger,
)
from jobs.schedule.kinds import Cron, Every
from jobs.upkeep import retention

pytestmark = pytest.mark.django_db(transaction=True)


def _running(job: Job, seconds_ago: float) -> JobRun:
    started = timezone.now() - timedelta(seconds=seconds_ago)
    return JobRun.objects.create(
        job=job,
        scheduled_for=started,
        trigger=Trigger.MANUAL,
        status=RunStatus.RUNNING,
        started_at=started,
    )


def _succeeded(job: Job, duration: float, ago: float) -> None:
    """A run that started ``ago`` seconds ago and succeeded (recorded as a finish does)."""
    run = _running(job, seconds_ago=ago)
    finished = run.scheduled_for + timedelta(seconds=duration)
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, finished_at=finished)


# --- running long -----------------------------------------------------------------------------


def test_a_run_past_its_time_limit_is_running_long_once(make_job: Callable[..., Job]) -> None:
    job = make_job("slow", soft_time_limit=10)
    fine = _running(make_job("fine", soft_time_limit=10), seconds_ago=12)  # within the grace
    run = _running(job, seconds_ago=10 + baseline.LIMIT_GRACE + 1)
    assert detect.check_running_long() == [run.pk]
    assert detect.check_running_long() == [run.pk]  # seen again: still one incident
    incident = Incident.objects.get(kind="running_long")
    assert (incident.job_id, incident.last_run_id, incident.bad_runs) == (job.pk, run.pk, 1)
    assert "time limit of 10 s" in incident.summary
    assert not Incident.objects.filter(job=fine.job).exists()
    # It ends (here: succeeds): the incident resolves, notified on the same channels.
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, finished_at=timezone.now())
    incident.refresh_from_db()
    assert incident.resolved_by_run_id == run.pk
    events = AlertDelivery.objects.filter(incident=incident).values_list("event", flat=True)
    assert sorted(events) == ["opened", "opened", "resolved", "resolved"]


def _waiting_on_a_row_lock() -> bool:
    """Whether another session of this database waits for a lock (maintenance, on the run)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND wait_event_type = 'Lock')"
        )
        return bool(cursor.fetchone()[0])


def test_a_run_ending_while_it_is_found_running_long_leaves_no_incident_open(
    make_job: Callable[..., Job],
) -> None:
    """The finish is written while maintenance opens the running-long incident: maintenance
    waits for the run's row, then finds the run ended, and opens nothing. (It used to open, in
    the select list of its locking read, an incident no finish would ever resolve: seen in CI
    as a second "opened" after the "resolved".)"""
    from django.db import connection

    job = make_job("ending", soft_time_limit=10)
    run = _running(job, seconds_ago=10 + baseline.LIMIT_GRACE + 1)
    found: list[list[int]] = []

    def maintenance() -> None:
        try:
            found.append(detect.check_running_long())
        finally:
            connection.close()

    params = connection.get_connection_params()
    with psycopg.connect(**params) as finisher:  # a transaction until commit()
        finisher.execute(
            "UPDATE jobs_jobrun SET status = 'succeeded', finished_at = now() WHERE id = %s",
            [run.pk],
        )
        looking = threading.Thread(target=maintenance)
        looking.start()
        deadline = time.monotonic() + 10
        while not _waiting_on_a_row_lock():  # it read the run as running, and waits on its row
            assert looking.is_alive() and time.monotonic() < deadline
            time.sleep(0.02)
        finisher.commit()
    looking.join(10)
    assert found == [[run.pk]]  # it was a suspect
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED
    assert not Incident.objects.exists()
    assert not AlertDelivery.objects.exists()


def test_without_a_limit_a_run_is_running_long_past_three_times_its_baseline_p95(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("learned")
    for i in range(baseline.MIN_SAMPLES):
        _succeeded(job, duration=30 + i, ago=3600 - i * 60)
    p95 = 33.8  # of 30..34 s
    young = _running(job, seconds_ago=p95 * 3 - 5)
    assert detect.check_running_long() == []
    JobRun.objects.filter(pk=young.pk).update(
        started_at=timezone.now() - timedelta(seconds=p95 * 3 + 5)
    )
    assert detect.check_running_long() == [young.pk]
    assert "3 x its baseline (p95 33.8 s of its last 5 successes)" in (
        Incident.objects.get(kind="running_long").summary
    )


def test_without_a_limit_or_enough_history_nothing_is_called_running_long(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("new")
    for _ in range(baseline.MIN_SAMPLES - 1):
        _succeeded(job, duration=1, ago=600)
    _running(job, seconds_ago=3600)
    assert detect.check_running_long() == []


def test_a_one_second_job_hanging_for_50_s_is_noticed_while_it_hangs(
    make_job: Callable[..., Job],
) -> None:
    """The old rule never called a run stuck before 60 s: a 1 s job hanging 50 s went unseen."""
    job = make_job("quick")
    for i in range(10):
        _succeeded(job, duration=1.0 + i / 100, ago=3600 - i * 60)
    hanging = _running(job, seconds_ago=50)
    assert detect.check_running_long() == [hanging.pk]
    incident = Incident.objects.get(kind="running_long")
    assert (incident.reason, incident.last_run_id) == ("running_long", hanging.pk)
    assert "at least 5 s" in incident.summary


def test_a_declared_maximum_decides_alone_and_the_switch_turns_the_baseline_off(
    make_job: Callable[..., Job],
) -> None:
    capped = make_job("capped", max_duration=2, soft_time_limit=600)
    run = _running(capped, seconds_ago=3)
    unjudged = make_job("unjudged", baseline_alerts=False)
    for i in range(10):
        _succeeded(unjudged, duration=1.0, ago=3600 - i * 60)
    _running(unjudged, seconds_ago=50)
    assert detect.check_running_long() == [run.pk]
    assert "maximum duration of 2 s" in Incident.objects.get(job=capped).summary


def test_running_long_is_one_incident_over_many_passes_resolved_by_its_run(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("hangs", max_duration=5)
    run = _running(job, seconds_ago=10)
    for _ in range(5):
        assert detect.check_running_long() == [run.pk]
    incident = Incident.objects.get(job=job)
    assert (incident.kind, incident.bad_runs, incident.resolved_at) == ("running_long", 1, None)
    assert AlertDelivery.objects.filter(incident=incident, event="opened").count() == 2
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.FAILED, finished_at=timezone.now())
    incident.refresh_from_db()
    assert incident.resolved_by_run_id == run.pk
    assert detect.check_running_long() == []
    assert Incident.objects.filter(job=job, kind="running_long").count() == 1


def test_an_incident_recorded_as_stuck_resolves_as_running_long_does(
    make_job: Callable[..., Job],
) -> None:
    """A process not yet upgraded may still record "stuck": its run's end resolves it."""
    job = make_job("old")
    run = _running(job, seconds_ago=100)
    detect.open_incident(job.pk, "stuck", "stuck", "recorded before 0039", run.pk)
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, finished_at=timezone.now())
    assert Incident.objects.get(job=job).resolved_by_run_id == run.pk


# --- too short --------------------------------------------------------------------------------


def _baseline_of_one_second(job: Job, runs: int = baseline.SHORT_MIN_SAMPLES) -> None:
    for i in range(runs):
        _succeeded(job, duration=1.0 + i / 100, ago=500 - i * 10)


def test_a_success_far_under_its_baseline_is_too_short_once_then_resolved_by_a_fine_one(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("hollow")
    _baseline_of_one_second(job)
    _succeeded(job, duration=0.01, ago=5)
    short = JobRun.objects.filter(job=job).latest("scheduled_for")
    for _ in range(3):
        assert detect.check_too_short() == [short.pk]
    incident = Incident.objects.get(job=job)
    assert (incident.kind, incident.reason, incident.last_run_id) == (
        "too_short",
        "too_short",
        short.pk,
    )
    assert (incident.bad_runs, incident.resolved_at) == (1, None)
    assert "of its last 10 successes" in incident.summary
    _succeeded(job, duration=1.0, ago=1)
    fine = JobRun.objects.filter(job=job).latest("scheduled_for")
    assert detect.check_too_short() == []
    incident.refresh_from_db()
    assert incident.resolved_by_run_id == fine.pk
    assert detect.check_too_short() == []  # seen again: nothing reopens
    assert Incident.objects.filter(job=job).count() == 1
    events = AlertDelivery.objects.filter(incident=incident).values_list("event", flat=True)
    assert sorted(events) == ["opened", "opened", "resolved", "resolved"]


def test_too_few_runs_make_no_baseline_to_be_too_short_against(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("young")
    _baseline_of_one_second(job, runs=baseline.SHORT_MIN_SAMPLES - 1)
    _succeeded(job, duration=0.01, ago=5)
    assert detect.check_too_short() == []
    assert not Incident.objects.exists()


def test_a_success_under_its_declared_minimum_is_too_short_without_a_baseline(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("did_nothing", min_duration=30, baseline_alerts=False)
    _succeeded(job, duration=2, ago=5)
    run = JobRun.objects.get(job=job)
    assert detect.check_too_short() == [run.pk]
    assert "minimum duration of 30 s" in Incident.objects.get(job=job).summary


# --- overdue ----------------------------------------------------------------------------------


def _age(job: Job, seconds: float) -> None:
    Job.objects.filter(pk=job.pk).update(updated_at=timezone.now() - timedelta(seconds=seconds))


def test_a_periodic_job_without_a_success_in_its_window_is_overdue(
    make_job: Callable[..., Job],
) -> None:
    quiet = make_job("quiet", schedule=Every(60), start_deadline=30)  # window 2 x 60 + 30 s
    healthy = make_job("healthy", schedule=Every(60), start_deadline=30)
    young = make_job("young", schedule=Every(60), start_deadline=30)
    paused = make_job("paused", schedule=Every(60), start_deadline=30)
    for job in (quiet, healthy, paused):
        _age(job, 3600)
    Job.objects.filter(pk=paused.pk).update(enabled=False)
    _age(young, 100)
    _succeeded(healthy, duration=1, ago=100)
    _succeeded(quiet, duration=1, ago=200)  # before its window
    assert detect.check_overdue_jobs(database_now()) == [quiet.pk]
    assert detect.check_overdue_jobs(database_now()) == [quiet.pk]
    incident = Incident.objects.get()
    assert (incident.job_id, incident.kind, incident.reason) == (quiet.pk, "overdue", "overdue")
    assert "150 s" in incident.summary
    # Its next success resolves it.
    _succeeded(quiet, duration=1, ago=1)
    incident.refresh_from_db()
    assert incident.resolved_at is not None


def test_a_paused_job_is_not_overdue(make_job: Callable[..., Job]) -> None:
    job = make_job("nightly", schedule=Cron("0 3 * * *"))
    _age(job, 4 * 86400)
    assert detect.check_overdue_jobs(database_now()) == [job.pk]
    Job.objects.filter(pk=job.pk).update(enabled=False)
    assert detect.check_overdue_jobs(database_now()) == []
    assert Incident.objects.get().resolved_at is not None


def test_a_blackout_over_its_slots_explains_a_silence(make_job: Callable[..., Job]) -> None:
    frozen = make_job("frozen", schedule=Every(60), start_deadline=30)
    other = make_job("other", schedule=Every(60), start_deadline=30)
    for job in (frozen, other):
        _age(job, 3600)
    now = database_now()
    Blackout.objects.create(
        name="release-freeze", job=frozen, starts_at=now - timedelta(hours=2), ends_at=now
    )
    # The window's slots are all inside the freeze: no run was due, nothing is overdue; the
    # other job's silence has no such reason.
    assert detect.check_overdue_jobs(now) == [other.pk]
    assert not Incident.objects.filter(job=frozen).exists()
    # A window of every job explains both; once it is over, so is the excuse.
    Blackout.objects.update(job=None, ends_at=now + timedelta(hours=1))
    assert detect.check_overdue_jobs(now) == []
    Blackout.objects.update(ends_at=now - timedelta(minutes=30))
    assert sorted(detect.check_overdue_jobs(now)) == sorted([frozen.pk, other.pk])


def test_a_calendar_without_a_business_day_in_the_window_explains_a_silence(
    make_job: Callable[..., Job],
) -> None:
    weekdays = make_job("weekdays", schedule=Cron("0 9 * * *"), business_days_only=True)
    daily = make_job("daily", schedule=Cron("0 9 * * *"))
    for job in (weekdays, daily):
        _age(job, 30 * 86400)
    # Monday 08:00 UTC: the window (2 days + the deadline) holds Saturday's and Sunday's 09:00.
    monday = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    assert detect.check_overdue_jobs(monday) == [daily.pk]
    # Tuesday 08:00: Monday's 09:00 was a business day, and no run succeeded.
    assert sorted(detect.check_overdue_jobs(monday + timedelta(days=1))) == sorted(
        [weekdays.pk, daily.pk]
    )


def test_a_job_outside_its_active_period_is_not_overdue(make_job: Callable[..., Job]) -> None:
    now = database_now()
    job = make_job("season", schedule=Every(60), start_deadline=30)
    Job.objects.filter(pk=job.pk).update(active_from=now + timedelta(days=1))
    _age(job, 3600)
    assert detect.check_overdue_jobs(now) == []


def test_a_failing_job_is_one_incident_not_also_overdue(make_job: Callable[..., Job]) -> None:
    job = make_job("broken", schedule=Every(60), start_deadline=30)
    _age(job, 3600)
    failed = JobRun.objects.create(
        job=job, scheduled_for=timezone.now(), status=RunStatus.FAILED, error="boom"
    )
    assert detect.check_overdue_jobs(database_now()) == []
    incident = Incident.objects.get(job=job)
    assert (incident.kind, incident.last_run_id) == ("failing", failed.pk)


def test_a_bad_run_of_an_overdue_job_joins_its_overdue_incident(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("silent", schedule=Every(60), start_deadline=30)
    _age(job, 3600)
    assert detect.check_overdue_jobs(database_now()) == [job.pk]
    failed = JobRun.objects.create(
        job=job, scheduled_for=timezone.now(), status=RunStatus.FAILED, error="boom"
    )
    incident = Incident.objects.get(job=job)  # one incident for one cause: no success
    assert (incident.kind, incident.last_run_id, incident.bad_runs) == ("overdue", failed.pk, 2)
    assert sorted(AlertDelivery.objects.values_list("event", flat=True)) == ["opened", "opened"]
    _succeeded(job, duration=1, ago=1)
    incident.refresh_from_db()
    assert incident.resolved_at is not None


# --- the cluster ------------------------------------------------------------------------------


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process counts as up long enough to judge the cluster."""
    monkeypatch.setattr(detect, "_STARTED", float("-inf"))


def _beat(seconds_ago: float) -> None:
    seen = timezone.now() - timedelta(seconds=seconds_ago)
    BeatHeartbeat.objects.update_or_create(
        name="h:1", defaults={"host": "h", "pid": 1, "started_at": seen, "last_seen": seen}
    )


def _node(seconds_ago: float) -> None:
    seen = timezone.now() - timedelta(seconds=seconds_ago)
    Node.objects.update_or_create(
        name="w@h",
        defaults={"host": "h", "pid": 1, "started_at": seen, "last_heartbeat": seen},
    )


def _open_cluster_kinds() -> set[str]:
    return set(Incident.objects.filter(job=None, resolved_at=None).values_list("kind", flat=True))


def test_no_live_beat_and_no_live_node_are_cluster_incidents(settled: None) -> None:
    _beat(seconds_ago=3600)
    _node(seconds_ago=3600)
    detect.check_cluster()
    detect.check_cluster()
    assert _open_cluster_kinds() == {"no_beat", "no_node"}
    assert Incident.objects.count() == 2
    _beat(seconds_ago=0)
    _node(seconds_ago=0)
    detect.check_cluster()
    assert _open_cluster_kinds() == set()
    assert (
        sorted(AlertDelivery.objects.values_list("event", flat=True))
        == ["opened"] * 4 + ["resolved"] * 4
    )


def test_a_young_process_does_not_judge_the_cluster(
    db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(detect, "_STARTED", time.monotonic())
    detect.check_cluster()  # no beat and no node, but this process has just started
    assert not Incident.objects.exists()


def test_retention_prunes_incidents_resolved_long_ago_with_nothing_left_to_send(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("flaky")

    def incident(summary: str, resolved: bool = True) -> int:
        opened = detect.open_incident(job.pk, "failing", "failed", summary)
        assert opened is not None
        if resolved:
            detect.resolve_incidents(job.pk, ["failing"])
        return opened

    old, waiting, recent = incident("old"), incident("old, resolution not sent"), incident("new")
    still_open = incident("open", resolved=False)
    long_ago = timezone.now() - timedelta(days=40)
    Incident.objects.filter(pk__in=[old, waiting]).update(resolved_at=long_ago)
    AlertDelivery.objects.exclude(incident_id=waiting).update(state="delivered")
    assert retention.prune(dry_run=True).incidents == 1
    assert retention.prune().incidents == 1
    assert set(Incident.objects.values_list("pk", flat=True)) == {waiting, recent, still_open}
    assert not AlertDelivery.objects.filter(incident_id=old).exists()
    forever = {**get_ops_conf().retention, "lost": None}
    Incident.objects.filter(pk=recent).update(resolved_at=long_ago)
    AlertDelivery.objects.update(state="delivered")
    assert retention.prune(retention=forever).incidents == 0
