"""The JSON API on a real database: authentication, listing, triggering at most once per
Idempotency-Key (also under concurrent retries), pause/resume, policy edits, and field-level
errors for every bad parameter, header or body."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, transaction
from django.test import Client
from django.utils import timezone
from django_celery_beat.models import ClockedSchedule

from jobs.audit import Actor
from jobs.exceptions import TokenRefused
from jobs.guard.runner import execute_run
from jobs.models import (
    ApiToken,
    AuditAction,
    AuditEntry,
    Blackout,
    Job,
    JobRun,
    RunStatus,
    Trigger,
)
from jobs.schedule.kinds import At, Every
from jobs.web import tokens
from tests.support.threads_at_once import at_once

pytestmark = pytest.mark.django_db


@pytest.fixture
def secret() -> str:
    return tokens.create("tests", actor=Actor.code("tests"))[1]


@pytest.fixture
def api(secret: str) -> Client:
    return Client(headers={"authorization": f"Bearer {secret}"})


def trigger(api: Client, name: str, key: str | None = "key-1") -> Any:
    headers = {} if key is None else {"idempotency-key": key}
    return api.post(f"/api/jobs/{name}/runs", headers=headers)


# --- authentication -----------------------------------------------------------------------------


def test_no_credentials_is_401_with_a_bearer_challenge(client: Client) -> None:
    response = client.get("/api/jobs")

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert "error" in response.json()


def test_unknown_token_is_401(client: Client) -> None:
    response = client.get("/api/jobs", headers={"authorization": "Bearer cj_not-a-token"})

    assert response.status_code == 401
    assert response.json()["error"] == "unknown or revoked API token"


def test_a_revoked_token_stops_working(api: Client) -> None:
    assert api.get("/api/jobs").status_code == 200

    assert tokens.revoke("tests", actor=Actor.code("tests"))

    assert api.get("/api/jobs").status_code == 401


def test_only_the_digest_is_stored_and_use_is_recorded(secret: str, api: Client) -> None:
    stored = ApiToken.objects.get(name="tests")
    assert secret not in (stored.digest, stored.prefix) and stored.digest == tokens.digest(secret)
    assert stored.last_used_at is None

    api.get("/api/jobs")

    stored.refresh_from_db()
    assert stored.last_used_at is not None


def test_a_read_only_token_reads_and_is_refused_every_write(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("report")
    _token, read_only_secret = tokens.create("grafana", read_only=True, actor=Actor.code("tests"))
    reader = Client(headers={"authorization": f"Bearer {read_only_secret}"})
    assert reader.get("/api/jobs").status_code == 200
    assert reader.get("/api/jobs/report/runs").status_code == 200
    assert reader.get("/metrics").status_code == 200

    writes = [
        reader.post("/api/jobs/report/runs", headers={"idempotency-key": "k"}),
        reader.post("/api/jobs/report/pause"),
        reader.post("/api/jobs/report/resume"),
        reader.patch(
            "/api/jobs/report", data={"policies": {"lease_ttl": 5}}, content_type="application/json"
        ),
    ]
    for response in writes:
        assert response.status_code == 403
        assert response.json()["error"].startswith("token 'grafana' is read-only: it cannot ")
    assert not JobRun.objects.exists()
    job.refresh_from_db()
    assert job.enabled and job.lease_ttl != 5


def test_a_staff_session_reads_and_needs_csrf_to_write(make_job: Callable[..., Job]) -> None:
    make_job("report")
    admin = User.objects.create_superuser("root", password="x")
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(admin)

    assert browser.get("/api/jobs").status_code == 200
    refused = trigger(browser, "report")
    assert refused.status_code == 403 and "CSRF" in refused.json()["error"]

    browser.get("/admin/")  # sets the CSRF cookie, as any admin page does
    csrf = browser.cookies["csrftoken"].value
    accepted = browser.post(
        "/api/jobs/report/runs", headers={"idempotency-key": "k", "x-csrftoken": csrf}
    )
    assert accepted.status_code == 201


def test_a_session_needs_staff_and_the_permission() -> None:
    user = User.objects.create_user("viewer", password="x")
    browser = Client()
    browser.force_login(user)
    assert browser.get("/api/jobs").status_code == 403

    user.is_staff = True
    user.save()
    assert browser.get("/api/jobs").status_code == 403

    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    user = User.objects.get(pk=user.pk)  # drop the permission cache
    browser.force_login(user)
    assert browser.get("/api/jobs").status_code == 200
    assert browser.post("/api/jobs/x/pause").status_code == 403


def test_the_schema_is_public(client: Client) -> None:
    response = client.get("/api/openapi.json")

    assert response.status_code == 200
    assert response.json()["openapi"].startswith("3.")


# --- jobs ---------------------------------------------------------------------------------------


def test_list_jobs_with_filters(api: Client, make_job: Callable[..., Job]) -> None:
    make_job("a")
    make_job("b", schedule=None)
    api.post("/api/jobs/a/pause")

    everything = api.get("/api/jobs").json()["results"]
    paused = api.get("/api/jobs", {"enabled": "false"}).json()["results"]
    continuous = api.get("/api/jobs", {"kind": "continuous"}).json()["results"]

    assert [job["name"] for job in everything] == ["a", "b"]
    assert [job["name"] for job in paused] == ["a"]
    assert [job["name"] for job in continuous] == ["b"]
    first = everything[0]
    assert first["schedule"] == "every hour"
    assert first["next_slot"] is None  # paused
    assert first["overlap"] == "skip" and first["lease_ttl"] == 30


def test_a_job_shows_its_next_slot(api: Client, make_job: Callable[..., Job]) -> None:
    make_job("minutely", schedule=Every(60))

    job = api.get("/api/jobs/minutely").json()

    assert job["next_slot"].endswith(":00Z")


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"enabled": "yes"}, "enabled"),
        ({"kind": "forever"}, "kind"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_job_filters_are_400_naming_the_parameter(
    api: Client, query: dict[str, str], field: str
) -> None:
    response = api.get("/api/jobs", query)

    assert response.status_code == 400
    assert list(response.json()["fields"]) == [field]


def test_unknown_job_is_404_json(api: Client) -> None:
    for path in ("/api/jobs/nope", "/api/jobs/nope/runs", "/api/jobs/no%00pe"):
        response = api.get(path)
        assert response.status_code == 404, path
        assert "no job named" in response.json()["error"]


def test_wrong_method_is_405_with_allow(api: Client) -> None:
    response = api.delete("/api/jobs")

    assert response.status_code == 405
    assert response["Allow"] == "GET, POST, HEAD, OPTIONS"


def test_head_answers_like_get_without_a_body(api: Client, make_job: Callable[..., Job]) -> None:
    make_job("report")
    for path in ("/api/jobs", "/api/jobs/report", "/api/jobs/report/runs", "/api/openapi.json"):
        got = api.get(path)
        head = api.head(path)
        assert head.status_code == 200, path
        assert head.content == b""
        assert head["Content-Type"] == got["Content-Type"] == "application/json"
        assert head["Content-Length"] == str(len(got.content))


def test_head_needs_the_same_credentials_as_get(client: Client) -> None:
    assert client.head("/api/jobs").status_code == 401


def test_options_lists_the_allowed_methods(client: Client, make_job: Callable[..., Job]) -> None:
    make_job("report")
    expected = {
        "/api/jobs": "GET, POST, HEAD, OPTIONS",
        "/api/jobs/report": "GET, PATCH, DELETE, HEAD, OPTIONS",
        "/api/jobs/report/runs": "GET, POST, HEAD, OPTIONS",
        "/api/jobs/report/pause": "POST, OPTIONS",
    }
    for path, allow in expected.items():
        response = client.options(path)  # no credentials: the methods are no secret
        assert response.status_code == 204, path
        assert response["Allow"] == allow


# --- triggering ---------------------------------------------------------------------------------


def test_trigger_needs_an_idempotency_key(api: Client, make_job: Callable[..., Job]) -> None:
    make_job("report")

    for key in (None, "", "has space", "x" * 201, "é"):
        response = trigger(api, "report", key)
        assert response.status_code == 400, key
        assert list(response.json()["fields"]) == ["Idempotency-Key"]
    assert not JobRun.objects.exists()


def test_the_same_key_twice_is_the_same_run(api: Client, make_job: Callable[..., Job]) -> None:
    make_job("report")
    make_job("other")

    first = trigger(api, "report", "order-42")
    again = trigger(api, "report", "order-42")
    elsewhere = trigger(api, "other", "order-42")
    fresh = trigger(api, "report", "order-43")

    assert (first.status_code, again.status_code) == (201, 200)
    assert first["Idempotent-Replayed"] == "false" and again["Idempotent-Replayed"] == "true"
    assert first.json() == again.json()
    assert first["Location"] == f"/api/runs/{first.json()['id']}"
    assert elsewhere.status_code == fresh.status_code == 201
    run = JobRun.objects.get(pk=first.json()["id"])
    assert (run.trigger, run.status, run.idempotency_key) == (
        Trigger.API,
        RunStatus.SCHEDULED,
        "order-42",
    )
    assert JobRun.objects.filter(job__name="report").count() == 2


def test_a_trigger_body_gives_the_run_its_own_kwargs(
    api: Client, make_job: Callable[..., Job], tmp_path: Path
) -> None:
    make_job("report", task="tests.record", kwargs={"log": "/dev/null"})

    def post(body: str, key: str) -> Any:
        return api.post(
            "/api/jobs/report/runs",
            data=body,
            content_type="application/json",
            headers={"idempotency-key": key},
        )

    own_log = tmp_path / "own.log"
    made = post(json.dumps({"kwargs": {"log": str(own_log), "seconds": 0.01}}), "with-kwargs")
    assert made.status_code == 201
    run = JobRun.objects.get(pk=made.json()["id"])
    assert run.kwargs == {"log": str(own_log), "seconds": 0.01}
    execute_run(run.pk, task_id="t", node="n")
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED
    assert len(own_log.read_text().splitlines()) == 1, "the run ran with its own kwargs"
    for body, field in [
        ('{"kwargs": {"nope": 1}}', "kwargs"),
        ('{"kwargs": [1]}', "kwargs"),
        ('{"args": [1]}', "args"),
        ("[]", "body"),
    ]:
        refused = post(body, f"refused-{field}-{len(body)}")
        assert refused.status_code == 400, body
        assert list(refused.json()["fields"]) == [field], body
    assert JobRun.objects.count() == 1, "a refused trigger records nothing"


def test_the_same_key_with_another_body_is_a_422_naming_the_key(
    api: Client, make_job: Callable[..., Job]
) -> None:
    make_job("report", task="tests.record", kwargs={"log": "/dev/null"})

    def post(body: str | None, key: str = "order-42") -> Any:
        if body is None:
            return api.post("/api/jobs/report/runs", headers={"idempotency-key": key})
        return api.post(
            "/api/jobs/report/runs",
            data=body,
            content_type="application/json",
            headers={"idempotency-key": key},
        )

    first = post('{"kwargs": {"log": "/dev/null", "seconds": 0.01}}')
    # The same request, its keys in another order and spaced otherwise: replayed.
    same = post('{"kwargs":{"seconds":0.01,"log":"/dev/null"}}')
    other = post('{"kwargs": {"log": "/dev/null", "seconds": 0.02}}')
    bare = post(None)

    assert (first.status_code, same.status_code) == (201, 200)
    assert same.json()["id"] == first.json()["id"] and same["Idempotent-Replayed"] == "true"
    for refused in (other, bare):
        assert refused.status_code == 422
        error = refused.json()
        assert list(error["fields"]) == ["Idempotency-Key"]
        assert "Idempotency-Key 'order-42' was already used" in error["error"]
    (run,) = JobRun.objects.filter(job__name="report")
    assert run.kwargs == {"log": "/dev/null", "seconds": 0.01}
    assert AuditEntry.objects.filter(action=AuditAction.RUN_NOW).count() == 1
    # Another key is another request.
    assert post(None, "order-43").status_code == 201


def test_no_kwargs_and_empty_kwargs_are_the_same_request(
    api: Client, make_job: Callable[..., Job]
) -> None:
    make_job("report", task="tests.record", kwargs={"log": "/dev/null"})

    def post(body: str | None, key: str) -> Any:
        headers = {"idempotency-key": key}
        if body is None:
            return api.post("/api/jobs/report/runs", headers=headers)
        return api.post("/api/jobs/report/runs", body, "application/json", headers=headers)

    bare = post(None, "k1")
    empty = post('{"kwargs": {}}', "k1")
    empty_first = post('{"kwargs": {}}', "k2")
    bare_after = post("", "k2")

    assert (bare.status_code, empty.status_code) == (201, 200), empty.content
    assert (empty_first.status_code, bare_after.status_code) == (201, 200), bare_after.content
    assert empty.json()["id"] == bare.json()["id"]
    assert bare_after.json()["id"] == empty_first.json()["id"]
    assert JobRun.objects.filter(job__name="report").count() == 2


def test_an_idempotency_key_header_sent_twice_is_a_400_naming_it(
    api: Client, make_job: Callable[..., Job]
) -> None:
    make_job("report")

    # What a WSGI server makes of two Idempotency-Key headers: one, their values joined.
    response = trigger(api, "report", "order-42,order-43")

    assert response.status_code == 400
    assert response.json()["fields"] == {
        "Idempotency-Key": ["give the header once (a key cannot contain a comma)"]
    }
    assert not JobRun.objects.exists()


LONE_SURROGATE = '"\\ud800"'  # JSON's escape for a code point UTF-8 cannot encode


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("POST", "/api/jobs/report/runs", '{"kwargs": {"seconds": %s}}', "kwargs"),
        ("POST", "/api/jobs/report/runs", '{"kwargs": {%s: 1}}', "kwargs"),
        ("PATCH", "/api/jobs/report", '{"queue": %s}', "queue"),
        ("PATCH", "/api/jobs/report", '{"after": [%s]}', "after"),
        ("POST", "/api/blackouts", '{"name": %s, "starts_at": "2030-01-01T00:00:00Z", '
                                   '"ends_at": "2030-01-02T00:00:00Z"}', "name"),
        ("POST", "/api/blackouts", '{"name": "w", "description": %s, '
                                   '"starts_at": "2030-01-01T00:00:00Z", '
                                   '"ends_at": "2030-01-02T00:00:00Z"}', "description"),
        ("POST", "/api/blackouts", '{"name": "w", "job": %s, '
                                   '"starts_at": "2030-01-01T00:00:00Z", '
                                   '"ends_at": "2030-01-02T00:00:00Z"}', "job"),
        ("POST", "/api/jobs/report/runs", '{%s: 1}', "body"),
    ],
    ids=["kwargs-value", "kwargs-key", "queue", "after", "window-name", "window-description",
         "window-job", "field-name"],
)  # fmt: skip
def test_a_lone_surrogate_in_a_body_is_a_400_naming_the_field(
    api: Client, make_job: Callable[..., Job], method: str, path: str, body: str, field: str
) -> None:
    make_job("report", task="tests.record", kwargs={"log": "/dev/null"})

    response = api.generic(
        method,
        path,
        body % LONE_SURROGATE,
        content_type="application/json",
        headers={"idempotency-key": "k"},
    )

    assert response.status_code == 400, response.content
    assert list(response.json()["fields"]) == [field]
    assert "lone surrogate" in response.json()["fields"][field][0]
    assert not JobRun.objects.exists() and not Blackout.objects.exists()


@pytest.mark.parametrize(
    "kwargs",
    [{"seconds": "x" * 1024 * 1024}, {"seconds": [0] * 100_000}],
    ids=["1-MB-string", "100000-element-list"],
)
def test_kwargs_over_the_bound_are_a_400_naming_them(
    api: Client, make_job: Callable[..., Job], kwargs: dict[str, Any]
) -> None:
    make_job("report", task="tests.record", kwargs={"log": "/dev/null"})

    response = api.post(
        "/api/jobs/report/runs",
        {"kwargs": kwargs},
        content_type="application/json",
        headers={"idempotency-key": "k"},
    )

    assert response.status_code == 400, response.content[:300]
    (message,) = response.json()["fields"]["kwargs"]
    assert f"at most {64 * 1024}" in message
    assert not JobRun.objects.exists()


def test_a_blackout_description_over_the_bound_is_a_400_naming_it(api: Client) -> None:
    window = {"name": "w", "starts_at": "2030-01-01T00:00:00Z", "ends_at": "2030-01-02T00:00:00Z"}

    long = api.post("/api/blackouts", {**window, "description": "x" * 1024 * 1024},
                    content_type="application/json")  # fmt: skip
    at_bound = api.post("/api/blackouts", {**window, "description": "x" * 2000},
                        content_type="application/json")  # fmt: skip

    assert long.status_code == 400
    assert list(long.json()["fields"]) == ["description"]
    assert "at most 2000 characters" in long.json()["fields"]["description"][0]
    assert at_bound.status_code == 201
    assert Blackout.objects.get().description == "x" * 2000


def test_the_database_refuses_a_second_run_with_one_key(make_job: Callable[..., Job]) -> None:
    job = make_job("report")
    now = timezone.now()
    JobRun.objects.create(job=job, scheduled_for=now, trigger=Trigger.API, idempotency_key="k")

    with pytest.raises(IntegrityError), transaction.atomic():
        JobRun.objects.create(job=job, scheduled_for=now, trigger=Trigger.API, idempotency_key="k")
    # Runs without a key are unconstrained.
    JobRun.objects.create(job=job, scheduled_for=now, trigger=Trigger.MANUAL)
    JobRun.objects.create(job=job, scheduled_for=now, trigger=Trigger.MANUAL)


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_with_one_key_make_one_run(
    secret: str, make_job: Callable[..., Job]
) -> None:
    make_job("report")
    clients = 6

    def retry() -> tuple[int, int]:
        own = Client(headers={"authorization": f"Bearer {secret}"})
        response = trigger(own, "report", "same-key")
        return response.status_code, response.json()["id"]

    answers = at_once(clients, retry, timeout=30)

    assert len(answers) == clients
    assert len({run_id for _, run_id in answers}) == 1
    assert sorted(status for status, _ in answers) == [200] * (clients - 1) + [201]
    assert JobRun.objects.filter(job__name="report").count() == 1


# --- pause, resume, policies --------------------------------------------------------------------


def test_pause_and_resume(api: Client, make_job: Callable[..., Job]) -> None:
    job = make_job("report")

    paused = api.post("/api/jobs/report/pause")
    job.refresh_from_db()
    assert job.periodic_task is not None
    assert paused.status_code == 200 and paused.json()["enabled"] is False
    assert (job.enabled, job.periodic_task.enabled) == (False, False)

    resumed = api.post("/api/jobs/report/resume")
    job.periodic_task.refresh_from_db()
    assert resumed.json()["enabled"] is True and job.periodic_task.enabled


def test_patch_policies_makes_the_job_the_operators(
    api: Client, make_job: Callable[..., Job]
) -> None:
    make_job("report")
    Job.objects.filter(name="report").update(managed_by_code=True)

    response = api.patch(
        "/api/jobs/report",
        {"overlap": "wait", "start_deadline": 60, "time_limit": 120, "soft_time_limit": 90},
        content_type="application/json",
    )

    assert response.status_code == 200, response.json()
    job = Job.objects.get(name="report")
    assert (job.overlap, job.start_deadline, job.soft_time_limit, job.time_limit) == (
        "wait",
        60,
        90,
        120,
    )
    assert job.managed_by_code is False
    assert job.periodic_task is not None  # the schedule is untouched


def test_a_one_off_job_whose_time_passed_can_still_be_edited(
    api: Client, make_job: Callable[..., Job]
) -> None:
    # A one-off time past its start deadline is refused when it is given, not when it is kept.
    job = make_job("once", schedule=At(timezone.now() + timedelta(hours=1)))
    long_ago = timezone.now() - timedelta(days=1)
    ClockedSchedule.objects.filter(periodictask__job=job).update(clocked_time=long_ago)

    response = api.patch("/api/jobs/once", {"max_retries": 2}, content_type="application/json")

    assert response.status_code == 200, response.json()
    stored = Job.objects.select_related("periodic_task__clocked").get(name="once")
    assert stored.max_retries == 2
    assert stored.periodic_task is not None and stored.periodic_task.clocked is not None
    assert stored.periodic_task.clocked.clocked_time == long_ago


def test_patch_enabled_alone_is_a_pause_not_an_edit(
    api: Client, make_job: Callable[..., Job]
) -> None:
    make_job("report")
    Job.objects.filter(name="report").update(managed_by_code=True)

    response = api.patch("/api/jobs/report", {"enabled": False}, content_type="application/json")

    job = Job.objects.get(name="report")
    assert response.status_code == 200
    assert (job.enabled, job.managed_by_code) == (False, True)


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ("{not json", ["body"]),
        ("[1, 2]", ["body"]),
        ("{}", ["body"]),
        ('{"colour": "red"}', ["colour"]),
        ('{"enabled": "no"}', ["enabled"]),
        ('{"overlap": "sometimes", "lease_ttl": 2}', ["overlap", "lease_ttl"]),
        ('{"start_deadline": true}', ["start_deadline"]),
        ('{"start_deadline": 1e3}', ["start_deadline"]),
        ('{"max_retries": 101}', ["max_retries"]),
        ('{"priority": 10}', ["priority"]),
        ('{"queue": "' + "q" * 101 + '"}', ["queue"]),
        ('{"lease_ttl": 2147483647}', ["lease_ttl"]),
        ('{"queue": "re\\nports"}', ["queue"]),
        ('{"queue": "re\\u2028ports"}', ["queue"]),
        ('{"soft_time_limit": 60, "time_limit": 30}', ["soft_time_limit"]),
        ("[" * 100_000 + "]" * 100_000, ["body"]),
        ('{"enabled": ' + "[" * 100_000 + "]" * 100_000 + "}", ["body"]),
        ('{"priority": ' + "9" * 5000 + "}", ["body"]),
        (b"\xff\xfe{}", ["body"]),
    ],
    ids=lambda value: value[:40] if isinstance(value, str | bytes) else None,
)
def test_bad_patch_bodies_are_400_with_field_errors(
    api: Client, make_job: Callable[..., Job], body: str, fields: list[str]
) -> None:
    make_job("report")
    before = Job.objects.get(name="report").updated_at

    response = api.generic("PATCH", "/api/jobs/report", body, content_type="application/json")

    assert response.status_code == 400
    assert sorted(response.json()["fields"]) == sorted(fields)
    assert Job.objects.get(name="report").updated_at == before


def test_a_name_with_a_control_character_is_a_400_naming_the_field(
    api: Client, make_job: Callable[..., Job]
) -> None:
    # Issue 29: PATCH {"queue": "a\nb"} was accepted; its runs were never consumed.
    make_job("report")
    window = {"starts_at": "2030-01-01T00:00:00Z", "ends_at": "2030-01-02T00:00:00Z"}

    queue = api.patch("/api/jobs/report", {"queue": "a\nb"}, content_type="application/json")
    blackout = api.post(
        "/api/blackouts", {**window, "name": "a\nb"}, content_type="application/json"
    )

    assert queue.status_code == blackout.status_code == 400
    assert queue.json()["fields"] == {
        "queue": ["A queue name cannot contain a line break or another control character."]
    }
    assert blackout.json()["fields"] == {
        "name": ["A blackout window's name cannot contain a line break or another control "
                 "character."]
    }  # fmt: skip
    assert Job.objects.get(name="report").queue == "default"
    # One that reads like another: a right-to-left override in it.
    answer = api.patch(
        "/api/jobs/report", {"queue": "stroper\u202e"}, content_type="application/json"
    )
    assert answer.status_code == 400
    (message,) = answer.json()["fields"]["queue"]
    assert "cannot contain an invisible or format character" in message
    assert Job.objects.get(name="report").queue == "default"
    assert not Blackout.objects.exists()


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        # Issue 29: a check constraint's name under "body", and a range no broker honours.
        (
            {"soft_time_limit": 60, "time_limit": 30},
            "soft_time_limit",
            "Must be below the time limit (30 s): the job is asked to finish before it is killed.",
        ),
        ({"priority": -1}, "priority", "must be between 0 and 9"),
        ({"priority": 10}, "priority", "must be between 0 and 9"),
        ({"lease_ttl": 2147483647}, "lease_ttl", "must be between 3 and 86400"),
        ({"max_retries": -1}, "max_retries", "must be between 0 and 100"),
    ],
)
def test_a_bad_policy_is_a_400_saying_what_the_field_takes(
    api: Client, make_job: Callable[..., Job], body: dict[str, int], field: str, message: str
) -> None:
    make_job("report")

    response = api.patch("/api/jobs/report", body, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["fields"] == {field: [message]}
    stored = Job.objects.get(name="report")
    assert all(getattr(stored, name) != value for name, value in body.items())


# --- runs ---------------------------------------------------------------------------------------


def _runs(job: Job, count: int, status: RunStatus = RunStatus.SUCCEEDED) -> list[JobRun]:
    start = timezone.now() - timedelta(hours=1)
    return JobRun.objects.bulk_create(
        JobRun(job=job, scheduled_for=start + timedelta(minutes=i), status=status)
        for i in range(count)
    )


def test_list_runs_filters_and_pages(api: Client, make_job: Callable[..., Job]) -> None:
    report, other = make_job("report"), make_job("other")
    _runs(report, 5)
    _runs(report, 2, RunStatus.FAILED)
    _runs(other, 3)

    first = api.get("/api/runs", {"job": "report", "limit": "4"}).json()
    second = api.get(first["next"]).json()
    failed = api.get("/api/jobs/report/runs", {"status": "failed"}).json()

    assert len(first["results"]) == 4 and len(second["results"]) == 3
    assert second["next"] is None
    slots = [run["scheduled_for"] for run in first["results"] + second["results"]]
    assert slots == sorted(slots, reverse=True)
    assert {run["job"] for run in first["results"]} == {"report"}
    assert [run["status"] for run in failed["results"]] == ["failed", "failed"]


def test_runs_since_and_until(api: Client, make_job: Callable[..., Job]) -> None:
    runs = _runs(make_job("report"), 5)
    middle = runs[2].scheduled_for.isoformat()

    later = api.get("/api/runs", {"since": middle}).json()["results"]
    earlier = api.get("/api/runs", {"until": middle}).json()["results"]

    assert len(later) == 3 and len(earlier) == 2


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"status": "happy"}, "status"),
        ({"trigger": "magic"}, "trigger"),
        ({"limit": "0"}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"offset": "-1"}, "offset"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2030-13-01T00:00:00Z"}, "until"),
        ({"since": "0001-01-01T00:00:00+05:00"}, "since"),
        ({"node": "a\x00b"}, "node"),
        ({"job": ["a", "b"]}, "job"),
    ],
)
def test_bad_run_filters_are_400_naming_the_parameter(
    api: Client, query: dict[str, Any], field: str
) -> None:
    response = api.get("/api/runs", query)

    assert response.status_code == 400
    assert list(response.json()["fields"]) == [field]


def test_one_run_with_its_traceback(api: Client, make_job: Callable[..., Job]) -> None:
    run = _runs(make_job("report"), 1, RunStatus.FAILED)[0]
    JobRun.objects.filter(pk=run.pk).update(error="ValueError: boom", traceback="Traceback…")

    found = api.get(f"/api/runs/{run.pk}").json()

    assert (found["id"], found["job"], found["error"]) == (run.pk, "report", "ValueError: boom")
    assert found["traceback"] == "Traceback…"
    assert api.get("/api/runs/999999").status_code == 404
    assert api.get(f"/api/runs/{2**70}").status_code == 404


def test_unknown_api_paths_are_json_404(api: Client) -> None:
    for path in ("/api/runs/abc", "/api/runs/-1", "/api/nothing/here", "/api/jobs/a/b/c"):
        response = api.get(path)
        assert response.status_code == 404, path
        assert response["Content-Type"] == "application/json"


def test_a_nul_or_a_huge_number_in_a_path_is_a_json_404(api: Client) -> None:
    # Issue 29: DELETE /api/blackouts/a%00b was a 500 (PostgreSQL text cannot hold NUL).
    # tests/integration/test_api_fuzz.py fuzzes every route's path parameters.
    for method, path in [
        ("DELETE", "/api/blackouts/a%00b"),
        ("DELETE", "/api/blackouts/%00"),
        ("GET", "/api/runs/" + "9" * 5000),
    ]:
        response = api.generic(method, path)
        assert response.status_code == 404, path
        assert response["Content-Type"] == "application/json"
    # The CLI's removals of the same names: a name no window can have (a usage error, exit
    # status 2), no such token (1).
    with pytest.raises(CommandError, match=r"NAME: 'a\\x00b' cannot contain the NUL") as info:
        call_command("jobs", "blackout", "remove", "a\x00b", stderr=io.StringIO())
    assert info.value.returncode == 2
    with pytest.raises(CommandError, match=r"no token named") as info:
        call_command("apitoken", "revoke", "\x00", stdout=io.StringIO(), stderr=io.StringIO())
    assert info.value.returncode == 1


def test_the_apitoken_command_prints_the_secret_once() -> None:
    out = io.StringIO()
    call_command("apitoken", "create", "ci", stdout=out)
    secret = out.getvalue().strip()
    assert secret.startswith(tokens.TOKEN_PREFIX)
    assert tokens.authenticate(secret).name == "ci"

    with pytest.raises(CommandError, match="already exists") as duplicate:
        call_command("apitoken", "create", "ci")
    assert duplicate.value.returncode == 2

    call_command("apitoken", "create", "dashboard", "--read-only", stdout=io.StringIO())
    assert ApiToken.objects.get(name="dashboard").read_only
    assert not ApiToken.objects.get(name="ci").read_only

    listing = io.StringIO()
    call_command("apitoken", "list", stdout=listing)
    lines = listing.getvalue().splitlines()
    assert secret not in listing.getvalue()
    assert [line.split()[0] for line in lines] == ["ci", "dashboard"]
    assert "read-write" in lines[0] and "read-only" in lines[1]

    call_command("apitoken", "revoke", "ci", stdout=io.StringIO())
    with pytest.raises(TokenRefused, match="unknown or revoked"):
        tokens.authenticate(secret)
    with pytest.raises(CommandError, match="no token named"):
        call_command("apitoken", "revoke", "ci")


@pytest.mark.parametrize("debug", [False, True], ids=["production", "debug"])
def test_a_body_over_the_limit_is_a_json_413_saying_so(
    api: Client, make_job: Callable[..., Job], settings: Any, debug: bool
) -> None:
    # With DEBUG on, Django answered its HTML debug page with a 400 (issue 41).
    settings.DEBUG = debug
    make_job("report")
    body = '{"queue": "' + "q" * 3 * 1024 * 1024 + '"}'

    response = api.generic("PATCH", "/api/jobs/report", body, content_type="application/json")

    assert response.status_code == 413
    assert response["Content-Type"] == "application/json"
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    assert response.json()["error"] == f"the request body is too large: at most {limit} bytes"


def test_a_disallowed_host_gets_a_json_400_under_the_api(client: Any) -> None:
    response = client.get("/api/jobs", HTTP_HOST="not-allowed.example")
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert "Host header" in response.json()["error"]


def test_alerts_are_muted_and_unmuted_through_the_api(
    api: Client, make_job: Callable[..., Job]
) -> None:
    make_job("report")

    def patch(body: dict[str, Any]) -> Any:
        return api.patch("/api/jobs/report", body, content_type="application/json")

    muted = patch({"alerts_muted_until": "2030-01-01T09:00:00+01:00"})
    assert muted.status_code == 200
    assert muted.json()["alerts_muted_until"] == "2030-01-01T08:00:00Z"
    assert Job.objects.get(name="report").alerts_muted_until == datetime(2030, 1, 1, 8, tzinfo=UTC)
    # An offset Python takes and PostgreSQL does not (found by the schema fuzzer): stored in UTC.
    far = patch({"alerts_muted_until": "0192-02-10T13:07:30-21:30"})
    assert far.status_code == 200
    assert Job.objects.get(name="report").alerts_muted_until == datetime(
        192, 2, 11, 10, 37, 30, tzinfo=UTC
    )
    for bad in ("soon", "2030-01-01T09:00:00", "0001-01-01T00:00:00+14:00", 5):
        refused = patch({"alerts_muted_until": bad})
        assert refused.status_code == 400, bad
        assert list(refused.json()["fields"]) == ["alerts_muted_until"], bad
    unmuted = patch({"alerts_muted_until": None})
    assert unmuted.status_code == 200 and unmuted.json()["alerts_muted_until"] is None
    assert Job.objects.get(name="report").alerts_muted_until is None
