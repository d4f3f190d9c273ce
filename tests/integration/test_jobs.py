"""``manage.py jobs`` (jobs.management.commands.jobs) against real PostgreSQL: ``add`` with one
schedule of each kind, and operating a job (pause, resume, remove, run). Its one-line errors,
listings and records are jobs.cli's (test_cli.py)."""

from __future__ import annotations

import io
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask
from kombu.exceptions import OperationalError as BrokerUnreachable
from pytest_django import DjangoCaptureOnCommitCallbacks

from jobs import cli
from jobs.broker import messages
from jobs.guard import lease
from jobs.guard.runner import execute_run
from jobs.models import Job, JobRun, Node
from tests.support.cli_jobs import add, jobs, jobs_error, jobs_json

# --- add: one schedule of each kind -------------------------------------------------------


@pytest.mark.django_db
def test_add_every_creates_the_job_and_an_interval_beat_entry() -> None:
    out = jobs("add", "report", "--task", "tests.cli_example", "--every", "10s")
    job = Job.objects.get(name="report")
    assert out == "added job report: every 10 seconds\n"
    assert (job.task, job.kind, job.enabled) == ("tests.cli_example", "periodic", True)
    assert job.managed_by_code is False  # an operator's job: code declarations never touch it
    assert job.periodic_task is not None
    interval = job.periodic_task.interval
    assert interval is not None
    assert (interval.every, interval.period) == (10, IntervalSchedule.SECONDS)
    assert job.periodic_task.enabled and job.periodic_task.task == "tests.cli_example"


@pytest.mark.django_db
def test_add_cron_stores_the_fields_and_the_time_zone() -> None:
    job = add("nightly", "--cron", "30 2 * * *", "--tz", "Europe/Paris")
    assert job.periodic_task is not None
    crontab = job.periodic_task.crontab
    assert crontab is not None
    fields = (
        crontab.minute,
        crontab.hour,
        crontab.day_of_month,
        crontab.month_of_year,
        crontab.day_of_week,
    )
    assert fields == ("30", "2", "*", "*", "*")
    assert str(crontab.timezone) == "Europe/Paris"
    assert job.periodic_task.interval is None and job.periodic_task.clocked is None


BOTH_DAYS_NOTE = (
    " — only on days that match both the day of month (between day 1 and 7 of the month) and the"
    " day of week (Monday), as in Celery's crontab; Unix cron would run on either"
)


@pytest.mark.django_db
def test_add_and_show_say_both_day_fields_must_match() -> None:
    # Celery's crontab needs both day fields (12 runs a year here); Unix cron would run on
    # either (124). The answer, show and list say which.
    out = jobs("add", "first-monday", "--task", "tests.cli_example", "--cron", "0 9 1-7 * mon")
    words = "At 09:00 AM, between day 1 and 7 of the month, only on Monday (UTC)" + BOTH_DAYS_NOTE
    assert out == f"added job first-monday: {words}\n"
    assert f"schedule            {words}" in jobs("show", "first-monday").splitlines()
    assert jobs_json("show", "first-monday")["schedule"] == words
    entry = Job.objects.get(name="first-monday").periodic_task
    assert entry is not None and entry.crontab is not None
    assert (entry.crontab.day_of_month, entry.crontab.day_of_week) == ("1-7", "mon")  # as typed
    assert jobs("add", "weekdays", "--task", "tests.cli_example", "--cron", "0 9 * * 1-5") == (
        "added job weekdays: At 09:00 AM, Monday through Friday (UTC)\n"
    )


@pytest.mark.django_db
def test_add_answers_in_words_cron_descriptor_cannot_read() -> None:
    # Celery reads Sun-5,*/2 (every day); cron_descriptor raised on it, after the job was saved.
    out = jobs("add", "daily", "--task", "tests.cli_example", "--cron", "22 16 * * Sun-5,*/2")
    assert out == "added job daily: At 04:22 PM (UTC)\n"


@pytest.mark.django_db
def test_add_cron_without_tz_is_utc() -> None:
    job = add("hourly", "--cron", "0 * * * *")
    assert job.periodic_task is not None and job.periodic_task.crontab is not None
    assert str(job.periodic_task.crontab.timezone) == "UTC"


@pytest.mark.django_db
def test_add_at_creates_a_one_off_clocked_entry() -> None:
    job = add("once", "--at", "2030-01-01T10:00:00+01:00")
    assert job.periodic_task is not None and job.periodic_task.clocked is not None
    assert job.periodic_task.clocked.clocked_time == datetime(2030, 1, 1, 9, tzinfo=UTC)
    assert job.periodic_task.one_off is True


@pytest.mark.django_db
def test_a_one_off_time_a_moment_past_is_within_its_start_deadline() -> None:
    # Only a time past the start deadline is refused: this one still runs, late.
    when = timezone.now().replace(microsecond=0) - timedelta(seconds=30)
    job = add("just-now", "--at", when.isoformat())
    assert job.periodic_task is not None and job.periodic_task.clocked is not None
    assert job.periodic_task.clocked.clocked_time == when


@pytest.mark.django_db
def test_add_continuous_has_no_beat_entry() -> None:
    job = add("poller", "--continuous")
    assert job.kind == "continuous"
    assert job.periodic_task is None
    assert not PeriodicTask.objects.filter(name="job:poller").exists()


@pytest.mark.django_db
def test_add_sets_every_policy_arguments_and_paused() -> None:
    job = add(
        "tuned",
        "--every", "1m",
        "--kwargs", '{"city": "Lyon"}',
        "--paused",
        "--overlap", "wait",
        "--start-deadline", "60s",
        "--catch-up", "none",
        "--on-lost", "retry",
        "--max-retries", "3",
        "--retry-backoff", "1m",
        "--soft-time-limit", "30s",
        "--time-limit", "1m",
        "--lease-ttl", "45s",
        "--queue", "reports",
        "--priority", "7",
    )  # fmt: skip
    assert job.kwargs == {"city": "Lyon"} and job.args == []
    assert job.enabled is False
    policies = (
        job.overlap,
        job.start_deadline,
        job.catch_up,
        job.on_lost,
        job.max_retries,
        job.retry_backoff,
        job.soft_time_limit,
        job.time_limit,
        job.lease_ttl,
        job.queue,
        job.priority,
    )
    assert policies == ("wait", 60, "none", "retry", 3, 60, 30, 60, 45, "reports", 7)
    assert job.periodic_task is not None
    assert job.periodic_task.enabled is False and job.periodic_task.queue == "reports"
    assert job.managed_by_code is False


@pytest.mark.django_db
def test_add_accepts_positional_args() -> None:
    job = add("lyon", "--every", "10s", "--args", '["Lyon"]')
    assert job.args == ["Lyon"]


# --- operating a job ----------------------------------------------------------------------


@pytest.mark.django_db
def test_pause_and_resume_flip_the_job_and_its_beat_entry() -> None:
    add("report", "--every", "10s")
    assert jobs("pause", "report") == "paused report\n"
    job = Job.objects.select_related("periodic_task").get(name="report")
    assert job.enabled is False
    assert job.periodic_task is not None and job.periodic_task.enabled is False
    assert jobs("resume", "report") == "resumed report\n"
    job = Job.objects.select_related("periodic_task").get(name="report")
    assert job.enabled is True
    assert job.periodic_task is not None and job.periodic_task.enabled is True
    assert job.managed_by_code is False


@pytest.mark.django_db
def test_remove_deletes_the_job_and_its_beat_entry() -> None:
    add("report", "--every", "10s")
    add("keep", "--every", "10s")
    assert jobs("remove", "report") == "removed report\n"
    assert list(Job.objects.values_list("name", flat=True)) == ["keep"]
    assert not PeriodicTask.objects.filter(name="job:report").exists()
    assert PeriodicTask.objects.filter(name="job:keep").exists()


@pytest.mark.django_db
def test_run_creates_a_manual_run_and_prints_its_id(
    django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks,
) -> None:
    add("report", "--every", "1h")
    # The publish waits for the commit; the run row is the truth, so it is what we check.
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        out = jobs("run", "report")
    run = JobRun.objects.get()
    assert out == f"{run.pk}\n"
    assert (run.job.name, run.trigger, run.status) == ("report", "manual", "scheduled")
    assert abs((timezone.now() - run.scheduled_for).total_seconds()) < 60
    assert len(callbacks) == 2  # its publish and its audit log line


@pytest.mark.django_db
def test_run_with_kwargs_gives_this_run_its_own_over_the_jobs(
    django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks,
) -> None:
    add("report", "--every", "1h", "--kwargs", '{"city": "Paris"}')
    with django_capture_on_commit_callbacks(execute=False):
        out = jobs("run", "report", "--kwargs", '{"city": "Lyon"}')
    run = JobRun.objects.get()
    assert out == f"{run.pk}\n"
    assert run.kwargs == {"city": "Lyon"}
    assert Job.objects.get(name="report").kwargs == {"city": "Paris"}, "the job keeps its own"
    for flags, message in [
        (["--kwargs", '{"town": "Lyon"}'], "jobs run: error: --kwargs: tests.cli_example cannot"),
        (["--kwargs", "[1]"], "jobs run: error: --kwargs: Keyword arguments must be a JSON object"),
        (["--kwargs", "{"], "jobs run: error: --kwargs: "),
    ]:
        assert str(jobs_error("run", "report", *flags)).startswith(message), flags
    assert JobRun.objects.count() == 1, "a refused trigger records nothing"


@pytest.mark.django_db(transaction=True)
def test_run_with_the_broker_down_still_prints_the_id_of_the_recorded_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    add("report", "--every", "1h")

    def unreachable(*_args: object, **_kwargs: object) -> None:
        raise BrokerUnreachable("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    monkeypatch.setattr(messages, "publish", unreachable)
    out = jobs("run", "report")
    run = JobRun.objects.get()
    assert out == f"{run.pk}\n"
    assert (run.trigger, run.status) == ("manual", "scheduled")  # for maintenance to publish


@pytest.mark.django_db(transaction=True)
def test_run_says_what_became_of_a_run_a_worker_settled_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    add("nightly", "--every", "1h")  # overlap skip, the default
    key = Job.objects.get(name="nightly").lock_key
    held = lease.acquire(key, "worker1@host", 60)
    assert held is not None
    monkeypatch.setattr(messages, "publish", lambda *args, **kwargs: None)
    monkeypatch.setattr(cli, "a_worker_serves", lambda queue: queue == "default")

    def worker() -> None:
        """A node that receives each manual run as soon as it is committed."""
        try:
            done: set[int] = set()
            deadline = time.monotonic() + 20
            while len(done) < 2 and time.monotonic() < deadline:
                for run_id in JobRun.objects.exclude(pk__in=done).values_list("pk", flat=True):
                    execute_run(run_id, task_id=f"jobrun-{run_id}", node="worker2@host")
                    done.add(run_id)
                time.sleep(0.01)
        finally:
            connection.close()

    thread = threading.Thread(target=worker)
    thread.start()
    out, said = io.StringIO(), io.StringIO()
    call_command("jobs", "run", "nightly", stdout=out, stderr=said)
    record = jobs_json("run", "nightly")
    thread.join()

    first, second = JobRun.objects.order_by("pk")
    reason = f"lease {key} held by worker1@host (token {held.token})"
    assert out.getvalue() == f"{first.pk}\n", "the id alone on stdout, for scripts"
    assert said.getvalue() == f"run {first.pk} of nightly: skipped — {reason}\n"
    assert (first.status, first.error) == ("skipped", reason)
    assert (record["id"], record["status"], record["error"]) == (second.pk, "skipped", reason)
    started = time.monotonic()
    assert jobs("run", "nightly", "--wait", "0") == f"{second.pk + 1}\n", "no wait: the id"
    assert time.monotonic() - started < 1


@pytest.mark.django_db
def test_run_waits_only_for_a_live_node_that_serves_the_queue() -> None:
    now = timezone.now()
    stale = now - timedelta(hours=1)
    Node.objects.create(name="old@h", host="h", pid=1, started_at=stale, last_heartbeat=stale,
                        queues=["reports"])  # fmt: skip
    Node.objects.create(name="w1@h", host="h", pid=2, started_at=now, last_heartbeat=now,
                        queues=["default", "other"])  # fmt: skip

    assert cli.a_worker_serves("default")
    assert not cli.a_worker_serves("reports"), "its only node is dead"
    assert not cli.a_worker_serves("nowhere")


@pytest.mark.django_db
def test_run_json_says_a_run_not_yet_settled_is_scheduled(
    django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks,
) -> None:
    add("report", "--every", "1h")
    with django_capture_on_commit_callbacks(execute=False):
        record = jobs_json("run", "report")
    run = JobRun.objects.get()
    assert (record["id"], record["job"], record["status"]) == (run.pk, "report", "scheduled")


@pytest.mark.django_db
def test_coalesce_is_a_yes_no_flag() -> None:
    assert not add("piling", "--every", "10s").coalesce
    assert add("coalescing", "--every", "10s", "--coalesce", "yes").coalesce
    error = jobs_error("add", "other", "--task", "tests.cli_example", "--every", "10s",
                       "--coalesce", "maybe")  # fmt: skip
    assert str(error) == "jobs add: error: --coalesce: 'maybe': give yes or no"
