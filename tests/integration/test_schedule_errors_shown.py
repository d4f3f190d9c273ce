"""A job no beat can schedule shows why everywhere an operator looks, and the views survive it;
a run of a task that is no registered job function is never sent, nor ever executed."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import timedelta

import pytest
import redis
from celery import signals
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from jobs.audit import Actor
from jobs.beat.scheduler import ClusterScheduler
from jobs.broker import dispatch, messages
from jobs.models import Job, JobRun, RunStatus, ScheduleError
from jobs.schedule.kinds import Cron
from jobs.web import tokens
from project.celery import app

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "tests-schedule-errors"
NEVER = "0 0 31 2 *"


@pytest.fixture
def broken(make_job: Callable[..., Job]) -> Job:
    """A job whose crontab row was made never-firing around validation, seen by a beat."""
    job = make_job("broken", schedule=Cron("13 6 * * *"), queue=QUEUE)
    _, _, day, month, _ = NEVER.split()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE django_celery_beat_crontabschedule SET day_of_month = %s, month_of_year = %s"
            " WHERE id = (SELECT crontab_id FROM django_celery_beat_periodictask WHERE id = %s)",
            [day, month, job.periodic_task_id],
        )
    ClusterScheduler(app=app, clock=timezone.now, maintain=False).tick_at(timezone.now())
    assert ScheduleError.objects.filter(job=job).exists()
    return job


@pytest.fixture
def bearer() -> dict[str, str]:
    return {"authorization": f"Bearer {tokens.create('operator', actor=Actor.code('tests'))[1]}"}


def _jobs(*args: str) -> str:
    out = io.StringIO()
    call_command("jobs", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_the_cli_shows_the_error(broken: Job) -> None:
    record = json.loads(_jobs("show", "broken", "--json"))
    assert "never fires" in record["schedule_error"]
    assert "SCHEDULE ERROR" in _jobs("list")
    assert "never fires" in _jobs("show", "broken")
    assert json.loads(_jobs("list", "--json"))[0]["schedule_error"] == record["schedule_error"]


def test_the_api_shows_the_error_and_no_next_slot(broken: Job, bearer: dict[str, str]) -> None:
    response = Client(headers=bearer).get("/api/jobs/broken")
    assert response.status_code == 200
    assert "never fires" in response.json()["schedule_error"]
    assert response.json()["next_slot"] is None


def test_healthz_names_the_broken_job_and_stays_healthy_otherwise(
    broken: Job, bearer: dict[str, str]
) -> None:
    details = Client(headers=bearer).get("/healthz").json()["checks"]["schedules"]
    assert details["ok"] is True and details["broken"] == 1
    assert details["jobs"][0]["job"] == "broken" and "never fires" in details["jobs"][0]["error"]


def test_metrics_count_the_broken_jobs(broken: Job, bearer: dict[str, str]) -> None:
    body = Client(headers=bearer).get("/metrics").content.decode()
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }
    assert samples[("jobs_schedule_errors", ())] == 1
    assert samples[("jobs_schedule_error", (("job", "broken"),))] == 1


def test_the_admin_pages_show_the_error(broken: Job, admin_client: Client) -> None:
    listing = admin_client.get("/admin/jobs/job/")
    assert listing.status_code == 200
    assert b"cannot be scheduled" in listing.content and b"never fires" in listing.content
    page = admin_client.get(f"/admin/jobs/job/{broken.pk}/change/")
    assert page.status_code == 200 and b"never fires" in page.content


def test_pages_survive_a_time_zone_no_library_can_read(
    make_job: Callable[..., Job], admin_client: Client, bearer: dict[str, str]
) -> None:
    job = make_job("zoned", schedule=Cron("17 6 * * *"), queue=QUEUE)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE django_celery_beat_crontabschedule SET timezone = 'America'"
            " WHERE id = (SELECT crontab_id FROM django_celery_beat_periodictask WHERE id = %s)",
            [job.periodic_task_id],
        )
    assert admin_client.get("/admin/jobs/job/").status_code == 200
    assert admin_client.get(f"/admin/jobs/job/{job.pk}/change/").status_code == 200
    response = Client(headers=bearer).get("/api/jobs")
    assert response.status_code == 200
    assert "unreadable schedule" in response.json()["results"][0]["schedule"]
    assert "unreadable schedule" in _jobs("list")


@pytest.fixture
def queue() -> redis.Redis:
    client = redis.Redis.from_url(str(settings.CELERY_BROKER_URL))
    client.delete(QUEUE)
    return client


def test_a_run_of_a_task_that_is_no_job_function_is_never_sent(
    make_job: Callable[..., Job], queue: redis.Redis
) -> None:
    job = make_job("sneaky", queue=QUEUE)
    Job.objects.filter(pk=job.pk).update(task="os.system")  # written around validation
    job.refresh_from_db()
    run = JobRun.objects.create(job=job, scheduled_for=timezone.now())
    assert dispatch.publish_many([(job, run.pk, run.scheduled_for)]) == 0
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "'os.system' is not a registered job function" in run.error
    assert queue.llen(QUEUE) == 0


def test_a_worker_given_a_task_it_does_not_know_records_the_run_failed_unexecuted(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("elsewhere", queue=QUEUE)
    run = JobRun.objects.create(job=job, scheduled_for=timezone.now() - timedelta(seconds=1))

    class Consumer:
        hostname = "worker-x@host"

    signals.task_unknown.send(
        sender=Consumer(), message=None, exc=None, name="os.system", id=messages.task_id_for(run.pk)
    )
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.node == "worker-x@host"
    assert "'os.system' is not registered on worker worker-x@host" in run.error
    assert run.started_at is None  # never executed
