"""The e-mail channel: a plain-text message through Django's e-mail backend."""

from __future__ import annotations

from django.conf import settings
from django.core.mail import EmailMessage

from jobs.alerts.channels.base import DeliveryFailed
from jobs.alerts.notification import IDEMPOTENCY_HEADER, Notification
from jobs.conf import AlertsConf


def send_email(notification: Notification, conf: AlertsConf) -> None:
    message = EmailMessage(
        subject=notification.subject,
        body=_email_body(notification),
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=list(conf.emails),
        headers={IDEMPOTENCY_HEADER: notification.idempotency_key},
    )
    try:
        message.send(fail_silently=False)
    except (OSError, ValueError) as exc:  # smtplib's errors are OSErrors
        raise DeliveryFailed(f"e-mail: {exc}") from None


def _email_body(notification: Notification) -> str:
    body = notification.body
    lines = [notification.headline, ""]
    incident = body["incident"]
    lines.append(f"Incident #{incident['id']} ({incident['kind']}, reason {incident['reason']})")
    lines.append(f"Opened: {incident['opened_at']}")
    if incident["resolved_at"]:
        lines.append(f"Resolved: {incident['resolved_at']}")
    lines.append(f"Bad runs: {incident['bad_runs']}")
    if incident["summary"]:
        lines += ["", incident["summary"]]
    for name, run in body["runs"].items():
        if run and "status" in run:
            lines.append(f"{name} run: #{run['id']} {run['status']} {run['url'] or ''}".rstrip())
    links = [("Incident", incident["url"]), ("Job", body["job"] and body["job"]["url"])]
    lines += [""] + [f"{label}: {url}" for label, url in links if url]
    return "\n".join(lines) + "\n"
