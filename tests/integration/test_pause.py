"""A pause with a reason and an end, against real PostgreSQL: through the services, the CLI and
the API, one job or many (by queue, by name pattern), each audited with who, why and until when;
and the end, reached by the beats' ticks, resumed once however many beats tick."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from jobs import services
from jobs.audit import Actor
from jobs.database.database_clock import database_now
from jobs.models import AuditAction, AuditEntry, Job
from jobs.web import tokens
from tests.support.cli_jobs import jobs, jobs_error, jobs_json

OPERATOR = Actor.code("operator")


def _pause(name: str, reason: str = "", until: Any = None) -> Job:
    return services.pause(name, reason=reason, until=until, actor=OPERATOR)


def _audit(action: AuditAction) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(action=action).order_by("id"))


# --- the services -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_pause_records_who_why_and_until_when_and_a_resume_clears_them(
    make_job: Callable[..., Job],
) -> None:
    make_job("report")
    job = _pause("report", "  ledger migration  ", "2h")
    now = database_now()
    assert (job.enabled, job.paused_by, job.pause_reason) == (
        False,
        "code:operator",
        "ledger migration",
    )
    assert job.paused_until is not None
    assert (
        now + timedelta(hours=2) - timedelta(minutes=1)
        < job.paused_until
        <= now + timedelta(hours=2)
    )
    (paused,) = _audit(AuditAction.PAUSE)
    assert paused.before == {"enabled": True}
    assert paused.after == {
        "enabled": False,
        "paused_by": "code:operator",
        "pause_reason": "ledger migration",
        "paused_until": job.paused_until.isoformat(),
    }
    job = services.resume("report", actor=OPERATOR)
    stored = Job.objects.get(pk=job.pk)
    assert (stored.enabled, stored.paused_by, stored.pause_reason, stored.paused_until) == (
        True, "", "", None
    )  # fmt: skip
    (resumed,) = _audit(AuditAction.RESUME)
    assert resumed.before == paused.after and resumed.after == {"enabled": True}


@pytest.mark.django_db
def test_until_takes_an_iso_time_or_a_duration(make_job: Callable[..., Job]) -> None:
    make_job("report")
    later = (database_now() + timedelta(days=1)).replace(microsecond=0)
    assert _pause("report", until=later.isoformat()).paused_until == later
    naive = later.replace(tzinfo=None).isoformat()  # read as UTC
    assert _pause("report", until=naive).paused_until == later
    longer = _pause("report", until="1d12h").paused_until
    assert longer is not None and longer > later
    assert _pause("report", until=None).paused_until is None  # pausing again replaces it


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("until", "message"),
    [
        ("2020-01-01T00:00:00Z", "2020-01-01T00:00:00+00:00 has passed"),
        ("-2h", "has passed"),
        ("0s", "has passed"),
        ("soon", "'soon' is not an ISO 8601 time"),
        ("2h30", "'2h30' is not an ISO 8601 time"),
    ],
)
def test_until_in_the_past_or_unreadable_is_refused_naming_the_field(
    make_job: Callable[..., Job], until: str, message: str
) -> None:
    make_job("report")
    with pytest.raises(ValidationError) as info:
        _pause("report", until=until)
    assert list(info.value.message_dict) == ["until"]
    assert message in info.value.message_dict["until"][0]
    assert Job.objects.get(name="report").enabled and not _audit(AuditAction.PAUSE)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("x" * 301, "at most 300 characters"),
        ("two\nlines", "cannot contain a line break or another control character"),
        ("nul\x00", "cannot contain a line break or another control character"),
    ],
)
def test_a_long_or_control_character_reason_is_refused_naming_the_field(
    make_job: Callable[..., Job], reason: str, message: str
) -> None:
    make_job("report")
    with pytest.raises(ValidationError) as info:
        _pause("report", reason=reason)
    assert list(info.value.message_dict) == ["reason"]
    assert message in info.value.message_dict["reason"][0]


@pytest.mark.django_db
def test_many_jobs_paused_and_resumed_by_queue_and_pattern_each_audited(
    make_job: Callable[..., Job],
) -> None:
    for name, queue in (("billing.close", "money"), ("billing.send", "mail"), ("report", "money")):
        make_job(name, queue=queue)
    make_job("billing.held", queue="money")
    _pause("billing.held", "held for good")

    paused = services.pause_many(match="billing.*", reason="freeze", until="1h", actor=OPERATOR)
    assert [job.name for job in paused] == ["billing.close", "billing.send"]
    held = Job.objects.get(name="billing.held")
    assert (held.pause_reason, held.paused_until) == ("held for good", None)  # left as it was
    assert [e.job_name for e in _audit(AuditAction.PAUSE)] == [
        "billing.held", "billing.close", "billing.send"
    ]  # fmt: skip

    resumed = services.resume_many(queue="money", actor=OPERATOR)
    assert [job.name for job in resumed] == ["billing.close", "billing.held"]
    assert [e.job_name for e in _audit(AuditAction.RESUME)] == ["billing.close", "billing.held"]
    assert not Job.objects.get(name="billing.send").enabled
    with pytest.raises(ValidationError):
        services.pause_many(actor=OPERATOR)


# --- the CLI ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_cli_pause_with_reason_and_until_and_the_list_shows_them(
    make_job: Callable[..., Job],
) -> None:
    make_job("report")
    out = jobs("pause", "report", "--reason", "ledger migration", "--until", "2h")
    assert out.startswith("paused report: ledger migration (until ")
    (record,) = jobs_json("list")
    assert record["pause_reason"] == "ledger migration" and record["paused_by"].startswith("cli:")
    assert record["paused_until"] is not None
    listed = jobs("list")
    assert "paused by cli:" in listed and ": ledger migration" in listed


@pytest.mark.django_db
def test_cli_pause_and_resume_many(make_job: Callable[..., Job]) -> None:
    make_job("billing.close", queue="money")
    make_job("report", queue="money")
    make_job("billing.mail", queue="mail")
    out = jobs("pause", "--queue", "money", "--match", "billing.*", "--reason", "freeze")
    assert out.splitlines() == ["paused billing.close: freeze"]
    assert jobs("pause", "--queue", "nowhere").strip() == "no running job chosen"
    assert jobs("resume", "--match", "billing.*").splitlines() == ["resumed billing.close"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["pause", "report", "--until", "2001-01-01"], "jobs pause: error: --until: "),
        (["pause", "report", "--reason", "a\tb"], "jobs pause: error: --reason: "),
        (["pause"], "jobs pause: error: give NAME, or --queue and/or --match (not both)"),
        (["resume", "report", "--queue", "q"], "jobs resume: error: give NAME, or --queue"),
    ],
)
def test_cli_pause_errors_name_the_flag(
    make_job: Callable[..., Job], args: list[str], message: str
) -> None:
    make_job("report")
    error = jobs_error(*args)
    assert str(error).startswith(message) and error.returncode == 2


# --- the API ------------------------------------------------------------------------------------


@pytest.fixture
def api() -> Client:
    secret = tokens.create("deploy", actor=Actor.code("tests"))[1]
    return Client(headers={"authorization": f"Bearer {secret}"})


def _post(api: Client, path: str, body: Any = None) -> Any:
    if body is None:
        return api.post(path)
    return api.post(path, body, content_type="application/json")


@pytest.mark.django_db
def test_api_pause_with_reason_and_until(api: Client, make_job: Callable[..., Job]) -> None:
    make_job("report")
    response = _post(api, "/api/jobs/report/pause", {"reason": "deploy", "until": "2h"})
    assert response.status_code == 200
    record = response.json()
    assert (record["enabled"], record["paused_by"], record["pause_reason"]) == (
        False, "token:deploy", "deploy"
    )  # fmt: skip
    assert record["paused_until"] is not None
    refused = _post(api, "/api/jobs/report/pause", {"until": "2001-01-01T00:00:00Z"})
    assert refused.status_code == 400 and list(refused.json()["fields"]) == ["until"]
    assert _post(api, "/api/jobs/report/pause", {"why": "x"}).status_code == 400
    assert _post(api, "/api/jobs/report/pause", {"reason": 3}).status_code == 400
    assert _post(api, "/api/jobs/report/resume").json()["paused_by"] == ""


@pytest.mark.django_db
def test_api_pause_and_resume_many(api: Client, make_job: Callable[..., Job]) -> None:
    make_job("billing.close", queue="money")
    make_job("report", queue="money")
    paused = _post(api, "/api/jobs:pause", {"match": "billing.*", "reason": "freeze"})
    assert paused.status_code == 200 and paused.json() == {"paused": ["billing.close"]}
    resumed = _post(api, "/api/jobs:resume", {"queue": "money"})
    assert resumed.json() == {"resumed": ["billing.close"]}
    assert _post(api, "/api/jobs:pause", {}).status_code == 400
    assert AuditEntry.objects.filter(actor="token:deploy").count() == 2
