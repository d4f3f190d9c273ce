"""What an incident's notification says: a JSON body (webhook), a Slack-compatible ``text``,
and an e-mail subject. Built at delivery time from the incident and its runs."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.urls import reverse

from jobs.conf import get_alerts_conf
from jobs.models import AlertEvent, Incident, IncidentKind, JobRun
from jobs.values.serializers import flower_task_url

_WHAT = {
    IncidentKind.FAILING: "is failing",
    IncidentKind.RUNNING_LONG: "has a run running long (past its limit or baseline)",
    IncidentKind.TOO_SHORT: "had a success too short (far under its baseline or minimum)",
    IncidentKind.STUCK: "has a run running long (past its limit or baseline)",
    IncidentKind.OVERDUE: "is overdue (no successful run within its expected window)",
    IncidentKind.NO_BEAT: "no live beat: no slot is being fired",
    IncidentKind.NO_NODE: "no live worker node: no run can start",
}


@dataclass(frozen=True)
class Notification:
    idempotency_key: str
    event: str
    body: dict[str, Any]
    subject: str
    headline: str  # what ``text`` says, as plain text (no chat markup): the e-mail's first line

    @property
    def text(self) -> str:
        """The Slack/Mattermost message: its markup escaped in what the rows say."""
        text: str = self.body["text"]
        return text


def idempotency_key(incident_id: int, event: str) -> str:
    """Stable across attempts, senders and channels: the receiver's way to drop repeats."""
    return f"incident-{incident_id}-{event}"


# Slack's and Mattermost's markup in a webhook's text: `<...>` is a link or a mention
# (`<!channel>` pings everyone), `&` starts an entity; Mattermost's `@channel`, `@here`,
# `@all` ping without brackets, so a word joiner after `@` keeps it from being read as one.
# Every text from the cluster's rows (a job's name, an error) goes through it.
_CHAT_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "@": "@\u2060"})


def chat_escape(text: str) -> str:
    """``text`` shown as written in a Slack or Mattermost message, never as markup."""
    return text.translate(_CHAT_ESCAPES)


def header_text(text: str) -> str:
    """``text`` as one line fit for a mail header: line breaks and other control characters
    become spaces, so nothing in it can start a header of its own. (Django encodes what is not
    ASCII, RFC 2047.)"""
    printable = "".join(" " if unicodedata.category(c)[0] in "CZ" else c for c in text)
    return " ".join(printable.split())


def _admin_url(view: str, pk: int) -> str | None:
    """The admin page's absolute address; ``None`` without ``JOBS_PUBLIC_URL``: a relative
    link opens nowhere from a chat message or an e-mail (``manage.py check`` warns)."""
    base = get_alerts_conf().public_url
    return base + reverse(f"admin:jobs_{view}_change", args=[pk]) if base else None


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _run(run_id: int | None, runs: Mapping[int, JobRun]) -> dict[str, Any] | None:
    if run_id is None:
        return None
    run = runs.get(run_id)
    if run is None:  # pruned by retention since
        return {"id": run_id}
    return {
        "id": run.pk,
        "status": run.status,
        "trigger": run.trigger,
        "attempt": run.attempt,
        "scheduled_for": _iso(run.scheduled_for),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "node": run.node,
        "error": run.error[:1000],
        "url": _admin_url("jobrun", run.pk),
        "flower_url": flower_task_url(run),
    }


def build(incident: Incident, event: str, runs: Mapping[int, JobRun]) -> Notification:
    """The notification of ``event`` (opened / resolved) of ``incident``; ``runs`` holds the
    incident's runs that still exist (``Incident.first_run_id``, ``last_run_id``...)."""
    job = incident.job
    subject_name = f"job {job.name}" if job is not None else "the cluster"
    what = _WHAT.get(IncidentKind(incident.kind), incident.kind)
    incident_url = _admin_url("incident", incident.pk)
    if event == AlertEvent.OPENED:
        title = f"{subject_name} {what}" if job is not None else f"Cluster: {what}"
        detail = incident.summary.splitlines()[0][:300] if incident.summary else ""
        headline = f"[{incident.reason}] {title}" + (f": {detail}" if detail else "")
        text = f":rotating_light: {chat_escape(headline)}"
    else:
        ended = incident.resolved_at or incident.opened_at
        lasted = _human((ended - incident.opened_at).total_seconds())
        title = headline = f"{subject_name}: resolved ({incident.kind}, after {lasted})"
        text = f":white_check_mark: {chat_escape(title)}"
    name = f"incident #{incident.pk}"
    text += f" <{incident_url}|{name}>" if incident_url else f" ({name})"
    body = {
        "event": event,
        "idempotency_key": idempotency_key(incident.pk, event),
        "text": text,
        "incident": {
            "id": incident.pk,
            "kind": incident.kind,
            "reason": incident.reason,
            "summary": incident.summary,
            "opened_at": _iso(incident.opened_at),
            "resolved_at": _iso(incident.resolved_at),
            "bad_runs": incident.bad_runs,
            "url": incident_url,
        },
        "job": None
        if job is None
        else {"id": job.pk, "name": job.name, "task": job.task, "url": _admin_url("job", job.pk)},
        "runs": {
            "first": _run(incident.first_run_id, runs),
            "last": _run(incident.last_run_id, runs),
            "resolved_by": _run(incident.resolved_by_run_id, runs),
        },
    }
    label = "RESOLVED" if event == AlertEvent.RESOLVED else incident.reason.upper()
    subject = header_text(f"[jobs] {label}: {title}")
    return Notification(
        idempotency_key=idempotency_key(incident.pk, event),
        event=event,
        body=body,
        subject=subject[:200],
        headline=headline,
    )


def _human(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
