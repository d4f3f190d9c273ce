"""Jobs created, rescheduled and deleted through the JSON API as `jobs add` and `jobs remove`
make them: the same field names, the same validation (services.definition_from and create_job),
the same audit entries, and a beat that schedules a job the moment the API created it."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from jobs import audit
from jobs.audit import Actor
from jobs.beat.scheduler import ClusterScheduler
from jobs.models import AuditEntry, Job, JobRun
from jobs.web import tokens
from project.celery import app
from tests.support.virtual_clock import VirtualClock

pytestmark = pytest.mark.django_db

QUEUE = "tests-api-jobs"  # the beat test's messages, emptied by the redis_broker fixture


@pytest.fixture
def api() -> Client:
    secret = tokens.create("deploy", actor=Actor.code("tests"))[1]
    return Client(headers={"authorization": f"Bearer {secret}"})


def create(api: Client, **body: Any) -> Any:
    return api.post("/api/jobs", body, content_type="application/json")


def patch(api: Client, name: str, **body: Any) -> Any:
    return api.patch(f"/api/jobs/{name}", body, content_type="application/json")


def audit_trail(api: Client, job: str) -> list[dict[str, Any]]:
    """The job's entries as GET /api/audit reads them back, oldest first."""
    response = api.get("/api/audit", {"job": job})
    assert response.status_code == 200
    return list(reversed(response.json()["results"]))


# --- create -------------------------------------------------------------------------------------


def test_post_creates_a_job_with_jobs_adds_field_names(api: Client) -> None:
    response = create(
        api,
        name="nightly",
        task="tests.fail",
        cron="0 3 * * *",
        tz="Europe/Paris",
        overlap="wait",
        start_deadline=60,
        paused=True,
    )

    assert response.status_code == 201, response.json()
    assert response["Location"] == "/api/jobs/nightly"
    record = response.json()
    assert (record["name"], record["kind"], record["enabled"]) == ("nightly", "periodic", False)
    assert (record["overlap"], record["start_deadline"]) == ("wait", 60)
    job = Job.objects.select_related("periodic_task__crontab").get(name="nightly")
    assert job.periodic_task is not None and job.periodic_task.crontab is not None
    assert str(job.periodic_task.crontab.timezone) == "Europe/Paris"
    assert api.get("/api/jobs/nightly").json() == record


def test_the_api_and_jobs_add_make_the_same_job_from_the_same_values(api: Client) -> None:
    flags = ["--task", "tests.fail", "--every", "90s", "--lease-ttl", "20s", "--max-retries", "2"]
    call_command("jobs", "add", "by-cli", *flags, stdout=io.StringIO())
    response = create(
        api, name="by-api", task="tests.fail", every="90s", lease_ttl=20, max_retries=2
    )
    assert response.status_code == 201, response.json()

    def state(name: str) -> dict[str, Any]:
        job = Job.objects.select_related("periodic_task__interval").get(name=name)
        return {k: v for k, v in audit.job_state(job).items() if k != "name"}

    assert state("by-api") == state("by-cli")


@pytest.mark.parametrize(
    ("body", "kind", "schedule"),
    [
        ({"every": 10}, "periodic", "every 10 seconds"),
        ({"every": "1h30m"}, "periodic", "every 90 minutes"),
        ({"continuous": True}, "continuous", "continuous"),
        ({"triggered": True}, "triggered", "when triggered"),
    ],
)
def test_each_schedule_of_jobs_add_is_a_field(
    api: Client, body: dict[str, Any], kind: str, schedule: str
) -> None:
    response = create(api, name="j", task="tests.wait_for_stop", **body)

    assert response.status_code == 201, response.json()
    assert response.json()["kind"] == kind
    assert response.json()["schedule"].startswith(schedule)


def test_post_at_makes_a_one_off_job(api: Client) -> None:
    when = (timezone.now() + timedelta(hours=2)).replace(microsecond=0)

    response = create(api, name="once", task="tests.fail", at=when.isoformat())

    assert response.status_code == 201, response.json()
    assert response.json()["next_slot"] == when.isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"cron": "61 * * * *"}, ["cron"]),
        ({"cron": "0 3 * * *", "tz": "Mars/Olympus"}, ["tz"]),
        ({"task": "nowhere.to_be_found", "every": "10s"}, ["task"]),
        ({"every": "10s", "cron": "0 3 * * *"}, ["cron", "every"]),
        ({}, ["body"]),
        ({"every": "10s", "tz": "Europe/Paris"}, ["tz"]),
        ({"every": "-5s"}, ["every"]),
        ({"every": True}, ["every"]),
        ({"at": "2001-01-01T00:00:00Z"}, ["at"]),
        ({"at": "tomorrow"}, ["at"]),
        ({"continuous": "yes"}, ["continuous"]),
        ({"every": "10s", "colour": "red"}, ["colour"]),
        ({"every": "10s", "name": None}, ["name"]),
        ({"every": "10s", "args": [1]}, ["args"]),
        ({"every": "10s", "kwargs": {"city": "Lyon"}}, ["kwargs"]),
        ({"every": "10s", "overlap": "sometimes", "lease_ttl": 0}, ["lease_ttl", "overlap"]),
        ({"every": "10s", "after": ["no-such-job"]}, ["after"]),
        ({"every": "10s", "paused": "no"}, ["paused"]),
    ],
)
def test_a_bad_definition_is_a_400_naming_each_field(
    api: Client, body: dict[str, Any], fields: list[str]
) -> None:
    response = create(api, **{"name": "bad", "task": "tests.fail", **body})

    assert response.status_code == 400, response.json()
    assert sorted(response.json()["fields"]) == fields
    assert not Job.objects.exists() and not AuditEntry.objects.filter(action="add").exists()


def test_a_taken_name_is_a_409_and_changes_nothing(api: Client) -> None:
    assert create(api, name="nightly", task="tests.fail", every="1h").status_code == 201

    response = create(api, name="nightly", task="tests.wait_for_stop", cron="0 3 * * *")

    assert response.status_code == 409
    assert "already exists" in response.json()["error"]
    assert list(response.json()["fields"]) == ["name"]
    assert Job.objects.get(name="nightly").task == "tests.fail"
    assert [entry["action"] for entry in audit_trail(api, "nightly")] == ["add"]


def test_a_body_that_is_not_an_object_is_a_400(api: Client) -> None:
    response = api.post("/api/jobs", "[1]", content_type="application/json")

    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["body"]


# --- change the schedule ------------------------------------------------------------------------


def test_patch_replaces_the_schedule(api: Client) -> None:
    create(api, name="report", task="tests.fail", every="1h")

    response = patch(api, "report", cron="*/5 * * * *", tz="Europe/Paris", overlap="wait")

    assert response.status_code == 200, response.json()
    assert response.json()["schedule"].startswith("Every 5 minutes (Europe/Paris)")
    job = Job.objects.select_related("periodic_task").get(name="report")
    assert job.periodic_task is not None
    assert job.periodic_task.interval is None and job.periodic_task.crontab is not None
    assert job.overlap == "wait"
    assert PeriodicTask.objects.count() == 1, "the old entry is replaced, not left beside"
    edit = audit_trail(api, "report")[-1]
    assert (edit["action"], edit["actor"], edit["source"]) == ("edit", "token:deploy", "api")
    assert edit["before"] == {"schedule": "every hour", "overlap": "skip"}
    assert edit["after"]["schedule"].startswith("Every 5 minutes (Europe/Paris)")


def test_patch_can_make_a_periodic_job_continuous(api: Client) -> None:
    create(api, name="poller", task="tests.wait_for_stop", every="1h")

    response = patch(api, "poller", continuous=True)

    assert response.status_code == 200, response.json()
    assert response.json()["kind"] == "continuous"
    assert not PeriodicTask.objects.exists()


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"cron": "0 3 30 2 *"}, ["cron"]),
        ({"every": "10s", "cron": "0 3 * * *"}, ["cron", "every"]),
        ({"tz": "Europe/Paris"}, ["tz"]),
        ({"every": "10s", "lease_ttl": 0}, ["lease_ttl"]),
        ({"at": "2001-01-01T00:00:00Z"}, ["at"]),
    ],
)
def test_a_bad_schedule_patch_is_a_400_and_keeps_the_old_schedule(
    api: Client, body: dict[str, Any], fields: list[str]
) -> None:
    create(api, name="report", task="tests.fail", every="1h")

    response = patch(api, "report", **body)

    assert response.status_code == 400, response.json()
    assert sorted(response.json()["fields"]) == fields
    assert api.get("/api/jobs/report").json()["schedule"] == "every hour"
    assert [entry["action"] for entry in audit_trail(api, "report")] == ["add"]


def test_patching_an_unknown_job_is_a_404(api: Client) -> None:
    assert patch(api, "nowhere", every="10s").status_code == 404


# --- delete -------------------------------------------------------------------------------------


def test_delete_removes_the_job_and_its_beat_entry(api: Client) -> None:
    create(api, name="report", task="tests.fail", every="1h")
    create(api, name="keep", task="tests.fail", every="1h")

    response = api.delete("/api/jobs/report")

    assert response.status_code == 204
    assert api.get("/api/jobs/report").status_code == 404
    assert list(Job.objects.values_list("name", flat=True)) == ["keep"]
    assert list(PeriodicTask.objects.values_list("name", flat=True)) == ["job:keep"]
    assert api.delete("/api/jobs/report").status_code == 404
    trail = audit_trail(api, "report")
    assert [(e["action"], e["actor"], e["source"]) for e in trail] == [
        ("add", "token:deploy", "api"),
        ("delete", "token:deploy", "api"),
    ]
    assert trail[0]["after"]["schedule"] == trail[1]["before"]["schedule"] == "every hour"


# --- who may ------------------------------------------------------------------------------------


def test_a_read_only_token_can_neither_create_nor_delete(api: Client) -> None:
    create(api, name="report", task="tests.fail", every="1h")
    secret = tokens.create("grafana", read_only=True, actor=Actor.code("tests"))[1]
    reader = Client(headers={"authorization": f"Bearer {secret}"})

    made = create(reader, name="other", task="tests.fail", every="1h")
    deleted = reader.delete("/api/jobs/report")
    rescheduled = patch(reader, "report", every="10s")

    for response in (made, deleted, rescheduled):
        assert response.status_code == 403
    assert list(Job.objects.values_list("name", flat=True)) == ["report"]


def test_a_session_needs_the_add_and_delete_permissions(api: Client) -> None:
    create(api, name="report", task="tests.fail", every="1h")
    user = User.objects.create_user("operator", password="x", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_job", "change_job"]))
    browser = Client()
    browser.force_login(user)

    assert create(browser, name="other", task="tests.fail", every="1h").status_code == 403
    assert browser.delete("/api/jobs/report").status_code == 403

    user.user_permissions.add(*Permission.objects.filter(codename__in=["add_job", "delete_job"]))
    browser.force_login(User.objects.get(pk=user.pk))  # drop the permission cache
    assert create(browser, name="other", task="tests.fail", every="1h").status_code == 201
    assert browser.delete("/api/jobs/report").status_code == 204
    assert AuditEntry.objects.filter(actor="user:operator").count() == 2


def test_options_lists_the_new_methods(client: Client) -> None:
    assert client.options("/api/jobs")["Allow"] == "GET, POST, HEAD, OPTIONS"
    assert client.options("/api/jobs/x")["Allow"] == "GET, PATCH, DELETE, HEAD, OPTIONS"


# --- the beats ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_broker")
def test_a_beat_schedules_a_job_the_api_created(api: Client) -> None:
    # Beat time an hour behind the database's (as in test_scheduler): the job is created after
    # the beat's now, so it is owed no earlier slot.
    clock = VirtualClock(timezone.now().replace(second=0, microsecond=0) - timedelta(hours=1))
    beat = ClusterScheduler(app=app, clock=clock, maintain=False)
    beat.tick_at(clock.now)
    body = {"name": "fresh", "task": "tests.fail", "every": "10s", "queue": QUEUE}

    assert create(api, **body).status_code == 201
    beat.tick_at(clock.now + timedelta(seconds=1))  # reads the jobs changed since its last tick
    beat.tick_at(clock.now + timedelta(seconds=10, milliseconds=5))

    slots = JobRun.objects.filter(job__name="fresh").values_list("scheduled_for", flat=True)
    assert list(slots) == [clock.now + timedelta(seconds=10)]


def test_the_openapi_document_describes_create_and_delete(client: Client) -> None:
    paths = json.loads(client.get("/api/openapi.json").content)["paths"]

    assert paths["/api/jobs"]["post"]["operationId"] == "createJob"
    assert paths["/api/jobs/{name}"]["delete"]["operationId"] == "deleteJob"
    patchable = paths["/api/jobs/{name}"]["patch"]["requestBody"]["content"]["application/json"]
    assert patchable["schema"]["$ref"] == "#/components/schemas/JobPatch"


# --- durations (jobs.alerts.baseline) -----------------------------------------------------------


def test_patch_sets_the_duration_settings_with_an_audit_entry(api: Client) -> None:
    create(api, name="report", task="tests.fail", every="1h", max_duration=600)

    response = patch(api, "report", long_run_factor=2.5, min_duration=5, baseline_alerts=False)

    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["max_duration"], body["long_run_factor"]) == (600, 2.5)
    assert (body["min_duration"], body["baseline_alerts"]) == (5, False)
    edit = audit_trail(api, "report")[-1]
    assert edit["before"] == {
        "long_run_factor": None,
        "min_duration": None,
        "baseline_alerts": True,
    }
    assert edit["after"] == {"long_run_factor": 2.5, "min_duration": 5, "baseline_alerts": False}
    assert patch(api, "report", max_duration=None).json()["max_duration"] is None


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({"long_run_factor": "3"}, {"long_run_factor": ["must be a number or null"]}),
        ({"long_run_factor": 1}, {"long_run_factor": ["must be between 1.1 and 100"]}),
        ({"max_duration": 0}, {"max_duration": ["must be between 1 and 2147483647"]}),
        ({"min_duration": 1.5}, {"min_duration": ["must be a whole number or null"]}),
        ({"baseline_alerts": "no"}, {"baseline_alerts": ["must be true or false"]}),
        (
            {"max_duration": 30, "min_duration": 60},
            {
                "min_duration": [
                    "Must be below the maximum duration (30 s): a run cannot be both too short "
                    "and running long."
                ]
            },
        ),
    ],
)
def test_bad_duration_settings_are_a_400_naming_the_field(
    api: Client, body: dict[str, Any], errors: dict[str, list[str]]
) -> None:
    create(api, name="report", task="tests.fail", every="1h")

    response = patch(api, "report", **body)

    assert response.status_code == 400, response.json()
    assert response.json()["fields"] == errors
    assert [entry["action"] for entry in audit_trail(api, "report")] == ["add"]
