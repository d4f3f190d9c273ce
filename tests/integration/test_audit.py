"""The audit trail on a real database: each operator action through the admin, the CLI and the
API records who, what, on which job, lease or token, and the values before and after; entries
are read in the admin (read-only) and through ``GET /api/audit``; each one is logged once
committed, never with a token's secret; tokens record their creator and may expire."""

from __future__ import annotations

import getpass
import io
import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from pytest_django import DjangoCaptureOnCommitCallbacks

from jobs.audit import Actor
from jobs.guard import lease
from jobs.models import ApiToken, AuditEntry, Job, JobRun
from jobs.process import logcontext
from jobs.web import tokens
from tests.support.forms import job_form_data
from tests.support.pauses import paused as paused_state

pytestmark = pytest.mark.django_db

TESTS = Actor.code("tests")
CLI_ACTOR = f"cli:{getpass.getuser()}"


def entries(**filters: Any) -> list[AuditEntry]:
    """Oldest first: the order the actions were taken in."""
    return list(AuditEntry.objects.filter(**filters).order_by("at", "id"))


def only(**filters: Any) -> AuditEntry:
    (entry,) = entries(**filters)
    return entry


# --- the admin ---------------------------------------------------------------------------------


def admin_form(**overrides: str) -> dict[str, str]:
    return job_form_data(**{"kwargs": '{"log": "/tmp/audit.log"}', **overrides})


def admin_action(client: Client, action: str, *jobs: Job) -> None:
    response = client.post(
        reverse("admin:jobs_job_changelist"),
        # "apply": the pause action's own form submitted (its reason and end left empty).
        {"action": action, "_selected_action": [job.pk for job in jobs], "apply": "1"},
    )
    assert response.status_code == 302


def test_the_admin_records_add_edit_and_delete_with_the_user(admin_client: Client) -> None:
    response = admin_client.post(reverse("admin:jobs_job_add"), admin_form())
    assert response.status_code == 302
    job = Job.objects.get(name="report")
    change = reverse("admin:jobs_job_change", args=[job.pk])
    response = admin_client.post(change, admin_form(every="20s", overlap="wait"))
    assert response.status_code == 302
    response = admin_client.post(reverse("admin:jobs_job_delete", args=[job.pk]), {"post": "yes"})
    assert response.status_code == 302

    added, edited, deleted = entries(job_name="report")
    assert [e.action for e in (added, edited, deleted)] == ["add", "edit", "delete"]
    assert {(e.actor, e.source) for e in (added, edited, deleted)} == {("user:admin", "admin")}
    assert added.before is None
    assert added.after is not None
    assert added.after["schedule"] == "every 10 seconds"
    assert added.after["kwargs"] == {"log": "/tmp/audit.log"}
    assert added.after["overlap"] == "skip" and added.after["enabled"] is True
    # An edit records the changed fields only, each side.
    assert edited.before == {"schedule": "every 10 seconds", "overlap": "skip"}
    assert edited.after == {"schedule": "every 20 seconds", "overlap": "wait"}
    # A deletion keeps the whole job as it was; the entries keep its name, not the row.
    assert deleted.after is None
    assert deleted.before is not None
    assert deleted.before["schedule"] == "every 20 seconds" and deleted.before["name"] == "report"
    assert {e.job_id for e in (added, edited, deleted)} == {None}


def test_deleting_several_jobs_in_the_admin_records_each(
    admin_client: Client, make_job: Callable[..., Job]
) -> None:
    jobs = [make_job("a"), make_job("b")]

    response = admin_client.post(
        reverse("admin:jobs_job_changelist"),
        {"action": "delete_selected", "_selected_action": [j.pk for j in jobs], "post": "yes"},
    )

    assert response.status_code == 302
    assert not Job.objects.exists()
    deleted = entries(action="delete")
    assert sorted(e.job_name for e in deleted) == ["a", "b"]
    assert {(e.actor, e.source) for e in deleted} == {("user:admin", "admin")}


def test_a_rejected_admin_edit_records_nothing(
    admin_client: Client, make_job: Callable[..., Job]
) -> None:
    job = make_job("report")
    before = AuditEntry.objects.count()

    response = admin_client.post(
        reverse("admin:jobs_job_change", args=[job.pk]), admin_form(lease_ttl="1")
    )

    assert response.status_code == 200  # the form again, with the error
    assert AuditEntry.objects.count() == before


def test_the_admin_actions_are_recorded(admin_client: Client, make_job: Callable[..., Job]) -> None:
    job = make_job("report")
    held = lease.acquire(job.lock_key, "w1@host:7:run-1", 60)
    assert held is not None

    admin_action(admin_client, "pause", job)
    admin_action(admin_client, "resume", job)
    admin_action(admin_client, "run_now", job)
    admin_action(admin_client, "release_lease", job)

    pause, resume, run_now, release = entries(job=job, source="admin")
    assert {e.actor for e in (pause, resume, run_now, release)} == {"user:admin"}
    assert (pause.action, pause.before, pause.after) == (
        "pause",
        {"enabled": True},
        paused_state("user:admin"),
    )
    assert (resume.action, resume.before, resume.after) == (
        "resume",
        paused_state("user:admin"),
        {"enabled": True},
    )
    run = JobRun.objects.get(job=job)
    assert run_now.action == "run_now"
    assert run_now.after == {"run": run.pk, "trigger": "manual", "idempotency_key": ""}
    assert (release.action, release.target) == ("release_lease", job.lock_key)
    assert release.before == {"holder": "w1@host:7:run-1", "token": held.token, "live": True}
    assert release.after == {"holder": "w1@host:7:run-1", "token": held.token, "live": False}


def test_the_token_admin_shows_creator_and_expiry(admin_client: Client) -> None:
    token, _secret = tokens.create("ci", actor=TESTS, expires_in=timedelta(days=30))
    assert token.expires_at is not None

    listing = admin_client.get(reverse("admin:jobs_apitoken_changelist"))

    assert listing.status_code == 200
    (shown,) = listing.context["cl"].result_list
    assert (shown.created_by, shown.expires_at) == ("code:tests", token.expires_at)
    assert "code:tests" in listing.content.decode()


def test_revoking_a_token_in_the_admin_is_recorded(admin_client: Client) -> None:
    token, _secret = tokens.create("grafana", actor=TESTS, read_only=True)

    response = admin_client.post(
        reverse("admin:jobs_apitoken_delete", args=[token.pk]), {"post": "yes"}
    )

    assert response.status_code == 302
    assert not ApiToken.objects.exists()
    revoked = only(action="token_revoke")
    assert (revoked.actor, revoked.source, revoked.target) == ("user:admin", "admin", "grafana")
    assert revoked.before == {
        "name": "grafana",
        "read_only": True,
        "created_by": "code:tests",
        "expires_at": None,
    }


def test_the_audit_pages_show_entries_and_change_nothing(
    admin_client: Client, make_job: Callable[..., Job]
) -> None:
    job = make_job("report")
    admin_action(admin_client, "pause", job)
    entry = only(action="pause")

    listing = admin_client.get(reverse("admin:jobs_auditentry_changelist"), {"action": "pause"})
    detail = admin_client.get(reverse("admin:jobs_auditentry_change", args=[entry.pk]))
    job_page = admin_client.get(reverse("admin:jobs_job_change", args=[job.pk]))
    per_job = admin_client.get(
        reverse("admin:jobs_auditentry_changelist"), {"job__id__exact": job.pk}
    )
    deleting = admin_client.post(
        reverse("admin:jobs_auditentry_delete", args=[entry.pk]), {"post": "yes"}
    )
    editing = admin_client.post(
        reverse("admin:jobs_auditentry_change", args=[entry.pk]), {"actor": "user:nobody"}
    )

    assert listing.status_code == 200 and "user:admin" in listing.content.decode()
    assert detail.status_code == 200
    assert "&quot;enabled&quot;: false" in detail.content.decode()
    assert job_page.status_code == 200
    _runs, audit_inline = job_page.context["inline_admin_formsets"]
    assert [form.instance for form in audit_inline.formset.forms] == entries(job=job)[::-1]
    assert f"?job__id__exact={job.pk}" in job_page.content.decode()
    assert per_job.status_code == 200
    assert list(per_job.context["cl"].result_list) == entries(job=job)[::-1]
    assert (deleting.status_code, editing.status_code) == (403, 403)
    assert AuditEntry.objects.get(pk=entry.pk).actor == "user:admin"
    assert "delete_selected" not in listing.context["cl"].model_admin.get_actions(
        listing.wsgi_request
    )


# --- the CLI -----------------------------------------------------------------------------------


def cli(*args: str) -> str:
    out = io.StringIO()
    call_command("jobs", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_every_cli_verb_that_changes_something_is_recorded_as_the_os_user() -> None:
    cli("add", "report", "--task", "tests.record", "--every", "1h", "--kwargs", '{"log": "x"}')
    job = Job.objects.get(name="report")
    cli("pause", "report")
    cli("resume", "report")
    run_id = int(cli("run", "report"))
    cli("prune")
    cli("remove", "report")

    recorded = entries(source="cli")
    assert [e.action for e in recorded] == ["add", "pause", "resume", "run_now", "prune", "delete"]
    assert {e.actor for e in recorded} == {CLI_ACTOR}
    add, pause, resume, run_now, prune, delete = recorded
    assert add.after is not None and add.after["schedule"] == "every hour"
    assert (pause.before, pause.after) == ({"enabled": True}, paused_state(CLI_ACTOR))
    assert (resume.before, resume.after) == (paused_state(CLI_ACTOR), {"enabled": True})
    assert run_now.after == {"run": run_id, "trigger": "manual", "idempotency_key": ""}
    assert prune.after is not None
    assert set(prune.after["deleted"].values()) == {0}  # nothing old enough yet
    assert delete.before is not None and delete.before["enabled"] is True
    assert {e.job_name for e in (add, pause, resume, run_now, delete)} == {"report"}
    assert job.pk is not None and not Job.objects.filter(pk=job.pk).exists()


def test_a_dry_run_prune_and_a_refused_add_record_nothing() -> None:
    cli("prune", "--dry-run")
    with pytest.raises(CommandError, match="--task"):
        cli("add", "report", "--task", "no.such.function", "--every", "1h")

    assert not AuditEntry.objects.exists()


def test_apitoken_records_its_creator_expiry_and_revocation() -> None:
    out = io.StringIO()
    call_command("apitoken", "create", "ci", "--expires", "30d", stdout=out)
    secret = out.getvalue().strip()
    call_command("apitoken", "create", "forever", stdout=io.StringIO())
    listing = io.StringIO()
    call_command("apitoken", "list", stdout=listing)
    call_command("apitoken", "revoke", "ci", stdout=io.StringIO())

    created, _forever, revoked = entries(source="cli")
    assert (created.action, created.actor, created.target) == ("token_create", CLI_ACTOR, "ci")
    assert created.after is not None
    assert created.after["created_by"] == CLI_ACTOR and created.after["read_only"] is False
    expires = datetime.fromisoformat(created.after["expires_at"])
    assert abs(expires - (timezone.now() + timedelta(days=30))) < timedelta(minutes=1)
    assert (revoked.action, revoked.before, revoked.after) == (
        "token_revoke",
        created.after,
        None,
    )
    ci_line, forever_line = listing.getvalue().splitlines()
    assert f"by {CLI_ACTOR}" in ci_line and f"expires {expires.isoformat()}" in ci_line
    assert "never expires" in forever_line
    # Neither the secret nor any part of it is kept in the trail.
    stored = json.dumps([[e.before, e.after] for e in AuditEntry.objects.all()])
    assert secret not in stored and secret[3:13] not in stored


def test_a_bad_expiry_names_the_flag() -> None:
    with pytest.raises(CommandError, match="expires"):
        call_command("apitoken", "create", "ci", "--expires", "soon")
    assert not ApiToken.objects.exists()


# --- the API -----------------------------------------------------------------------------------


@pytest.fixture
def api() -> Client:
    secret = tokens.create("deploy", actor=TESTS)[1]
    return Client(headers={"authorization": f"Bearer {secret}"})


def test_api_writes_are_recorded_under_the_token_name(
    api: Client, make_job: Callable[..., Job]
) -> None:
    job = make_job("report")

    patched = api.patch(
        "/api/jobs/report",
        {"overlap": "wait", "start_deadline": 60, "enabled": False},
        content_type="application/json",
    )
    resumed = api.post("/api/jobs/report/resume")
    paused = api.post("/api/jobs/report/pause")
    triggered = api.post("/api/jobs/report/runs", headers={"idempotency-key": "deploy-1"})
    replayed = api.post("/api/jobs/report/runs", headers={"idempotency-key": "deploy-1"})

    assert [r.status_code for r in (patched, resumed, paused, triggered, replayed)] == [
        200,
        200,
        200,
        201,
        200,
    ]
    recorded = entries(job=job, source="api")
    assert {e.actor for e in recorded} == {"token:deploy"}
    edit, pause_by_patch, resume, pause, run_now = recorded  # a replay makes no run, no entry
    assert (edit.action, edit.before, edit.after) == (
        "edit",
        {"overlap": "skip", "start_deadline": 300},
        {"overlap": "wait", "start_deadline": 60},
    )
    assert (pause_by_patch.action, pause_by_patch.after) == ("pause", paused_state("token:deploy"))
    assert (resume.action, pause.action) == ("resume", "pause")
    assert run_now.after == {
        "run": triggered.json()["id"],
        "trigger": "api",
        "idempotency_key": "deploy-1",
    }


def test_a_refused_api_write_records_nothing(api: Client, make_job: Callable[..., Job]) -> None:
    make_job("report")
    before = AuditEntry.objects.count()

    response = api.patch(
        "/api/jobs/report",
        {"soft_time_limit": 60, "time_limit": 30},
        content_type="application/json",
    )

    assert response.status_code == 400
    assert AuditEntry.objects.count() == before


def test_a_session_user_is_recorded_with_the_api_as_source(make_job: Callable[..., Job]) -> None:
    job = make_job("report")
    user = User.objects.create_user("ops", password="x", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="change_job"))
    session = Client(enforce_csrf_checks=True)
    session.force_login(user)
    session.get("/admin/")  # sets the CSRF cookie
    csrf = session.cookies["csrftoken"].value

    response = session.post("/api/jobs/report/pause", headers={"x-csrftoken": csrf})

    assert response.status_code == 200
    entry = only(job=job, action="pause")
    assert (entry.actor, entry.source) == ("user:ops", "api")


def test_the_audit_api_lists_and_filters_entries(api: Client, make_job: Callable[..., Job]) -> None:
    reader_secret = tokens.create("grafana", actor=TESTS, read_only=True)[1]
    reader = Client(headers={"authorization": f"Bearer {reader_secret}"})
    make_job("report")
    make_job("other")
    api.post("/api/jobs/report/pause")
    api.post("/api/jobs/report/resume")
    api.post("/api/jobs/other/pause")

    everything = reader.get("/api/audit").json()
    report = reader.get("/api/audit", {"job": "report", "actor": "token:deploy"}).json()
    pauses = reader.get("/api/audit", {"action": "pause"}).json()
    first = reader.get("/api/audit", {"source": "api", "limit": "2"}).json()
    second = reader.get(first["next"]).json()

    newest = everything["results"][0]
    assert newest["action"] == "pause" and newest["job"] == "other"
    assert set(newest) == {
        "id",
        "at",
        "actor",
        "source",
        "action",
        "job",
        "target",
        "before",
        "after",
    }
    assert (newest["actor"], newest["source"], newest["target"]) == ("token:deploy", "api", None)
    assert (newest["before"], newest["after"]) == ({"enabled": True}, paused_state("token:deploy"))
    assert [e["action"] for e in report["results"]] == ["resume", "pause"]
    assert [e["job"] for e in pauses["results"]] == ["other", "report"]
    assert [e["action"] for e in first["results"] + second["results"]] == [
        "pause",
        "resume",
        "pause",
    ]
    assert second["next"] is None
    # Entries of creating jobs and tokens by code are there too, under their own actor.
    assert {"add", "token_create"} <= {e["action"] for e in everything["results"]}


def test_a_deleted_jobs_entries_stay_readable_by_its_name(
    api: Client, make_job: Callable[..., Job]
) -> None:
    make_job("report")
    api.post("/api/jobs/report/pause")
    call_command("jobs", "remove", "report", stdout=io.StringIO())

    history = api.get("/api/audit", {"job": "report"}).json()["results"]

    assert [e["action"] for e in history] == ["delete", "pause", "add"]


@pytest.mark.parametrize(
    ("query", "field"),
    [({"action": "explode"}, "action"), ({"limit": "0"}, "limit"), ({"who": "x"}, "who")],
)
def test_bad_audit_filters_are_400_naming_the_parameter(
    api: Client, query: dict[str, str], field: str
) -> None:
    response = api.get("/api/audit", query)

    assert response.status_code == 400
    assert field in response.json()["fields"]


def test_an_expired_token_is_refused_with_its_expiry_named(api: Client) -> None:
    token, secret = tokens.create("old", actor=TESTS, expires_in=timedelta(hours=1))
    expired = Client(headers={"authorization": f"Bearer {secret}"})
    assert expired.get("/api/jobs").status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    response = expired.get("/api/jobs")
    metrics = expired.get("/metrics")

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert response.json()["error"].startswith("API token 'old' expired at ")
    assert metrics.status_code in (401, 403)
    assert api.get("/api/jobs").status_code == 200  # other tokens unaffected


# --- the log line ------------------------------------------------------------------------------


def test_each_committed_entry_is_logged_once_and_never_with_a_secret(
    make_job: Callable[..., Job],
    caplog: pytest.LogCaptureFixture,
    django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks,
) -> None:
    make_job("report")
    caplog.set_level(logging.INFO, logger="jobs.audit")

    with django_capture_on_commit_callbacks(execute=True):
        cli("pause", "report")
    with django_capture_on_commit_callbacks(execute=True):
        _token, secret = tokens.create("ci", actor=TESTS)

    pause, created = [r for r in caplog.records if r.name == "jobs.audit"]
    assert pause.getMessage() == f"audit: pause report by {CLI_ACTOR}"
    fields = {
        key: getattr(pause, key)
        for key in ("action", "audit_action", "actor", "source", "job", "before", "after")
    }
    assert fields == {
        "action": "audit",
        "audit_action": "pause",
        "actor": CLI_ACTOR,
        "source": "cli",
        "job": "report",
        "before": {"enabled": True},
        "after": paused_state(CLI_ACTOR),
    }
    line = json.loads(logcontext.JsonFormatter().format(created))
    assert (line["audit_action"], line["target"]) == ("token_create", "ci")
    formatted = "".join(logcontext.JsonFormatter().format(r) for r in caplog.records)
    assert secret not in formatted and secret[3:13] not in formatted


def test_an_entry_rolled_back_with_its_change_is_never_logged(
    make_job: Callable[..., Job],
    caplog: pytest.LogCaptureFixture,
    django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks,
) -> None:
    tokens.create("ci", actor=TESTS)
    caplog.set_level(logging.INFO, logger="jobs.audit")

    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(ValidationError, match="already exists"),
    ):
        tokens.create("ci", actor=TESTS)

    assert [r for r in caplog.records if r.name == "jobs.audit"] == []
    assert len(entries(action="token_create")) == 1
