"""What an incident's notification says (jobs.alerts.notification): its signature, its stable
idempotency key, and the body, text and subject built from the incident and the runs left."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from jobs.alerts import notification
from jobs.conf import get_alerts_conf
from jobs.models import AlertEvent, Incident, IncidentKind, Job, JobRun, RunStatus, Trigger
from tests.support.cached_settings import overriding

OPENED_AT = datetime(2026, 11, 23, 22, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def public_url() -> Iterator[None]:
    """Links need the deployment's address (without it they are left out)."""
    with overriding(get_alerts_conf) as override:
        override(JOBS_PUBLIC_URL="https://jobs.example.com")
        yield


def _incident(**fields: object) -> Incident:
    values: dict[str, object] = {
        "pk": 7, "job": Job(pk=3, name="report", task="tests.record"),
        "kind": IncidentKind.FAILING, "reason": "failed",
        "summary": "ValueError: boom\nTraceback ...", "opened_at": OPENED_AT,
        "bad_runs": 2, "first_run_id": 11, "last_run_id": 12,
        **fields,
    }  # fmt: skip
    return Incident(**values)


def test_the_idempotency_key_is_the_incidents_and_events() -> None:
    assert notification.idempotency_key(7, AlertEvent.OPENED) == "incident-7-opened"


def test_an_opened_incident_of_a_job_says_what_and_why_with_its_runs() -> None:
    last = JobRun(
        pk=12, status=RunStatus.FAILED, trigger=Trigger.SCHEDULED, attempt=1,
        scheduled_for=OPENED_AT, node="worker@a", error="ValueError: boom",
    )  # fmt: skip
    built = notification.build(_incident(), AlertEvent.OPENED, {12: last})
    assert built.idempotency_key == "incident-7-opened" and built.event == "opened"
    assert built.text.startswith(":rotating_light: [failed] job report is failing: ValueError")
    assert built.text.endswith(
        " <https://jobs.example.com/admin/jobs/incident/7/change/|incident #7>"
    )
    assert built.subject == "[jobs] FAILED: job report is failing"
    assert built.body["job"]["name"] == "report" and built.body["incident"]["bad_runs"] == 2
    assert built.body["runs"]["first"] == {"id": 11}  # pruned since: its id alone
    assert built.body["runs"]["last"]["status"] == RunStatus.FAILED
    assert built.body["runs"]["last"]["scheduled_for"] == OPENED_AT.isoformat()
    assert built.body["runs"]["resolved_by"] is None


def test_a_resolved_incident_says_how_long_it_lasted() -> None:
    resolved = _incident(resolved_at=OPENED_AT + timedelta(minutes=30), resolved_by_run_id=13)
    built = notification.build(resolved, AlertEvent.RESOLVED, {})
    assert built.text.startswith(":white_check_mark: job report: resolved (failing, after 30 min)")
    assert built.subject == "[jobs] RESOLVED: job report: resolved (failing, after 30 min)"
    assert built.body["runs"]["resolved_by"] == {"id": 13}


def test_a_cluster_incident_names_the_cluster() -> None:
    cluster = _incident(job=None, kind=IncidentKind.NO_BEAT, reason="no_beat", summary="")
    built = notification.build(cluster, AlertEvent.OPENED, {})
    assert built.text.startswith(
        ":rotating_light: [no_beat] Cluster: no live beat: no slot is being fired <"
    )
    assert built.body["job"] is None
