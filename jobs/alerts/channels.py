"""Delivering one notification on one channel: a signed webhook POST, or an e-mail through
Django's e-mail backend. Each raises :class:`DeliveryFailed` saying why, and never waits longer
than its timeout, so a slow receiver delays only the alerts behind it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import EmailMessage

from jobs.alerts.notification import IDEMPOTENCY_HEADER, SIGNATURE_HEADER, Notification, sign
from jobs.alerts.targets import open_checked
from jobs.conf import AlertsConf

WEBHOOK_TIMEOUT = 10.0  # seconds, connect and each read


class DeliveryFailed(Exception):
    """The receiver did not take the notification; it will be retried."""


def send_webhook(notification: Notification, conf: AlertsConf) -> None:
    body = json.dumps(notification.body, sort_keys=True).encode()
    request = urllib.request.Request(
        conf.webhook_url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "clusterjobs-alerts",
            IDEMPOTENCY_HEADER: notification.idempotency_key,
            "X-Jobs-Event": notification.event,
            SIGNATURE_HEADER: sign(body, conf.webhook_secret),
        },
    )
    try:
        opened = open_checked(request, WEBHOOK_TIMEOUT, allow_private=conf.allow_private_targets)
        with opened as response:
            response.read(1024)
    except urllib.error.HTTPError as exc:
        detail = exc.read(300).decode(errors="replace").strip()
        raise DeliveryFailed(f"HTTP {exc.code} {exc.reason}: {detail}".rstrip(": ")) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        # The host only: a webhook URL's path is often its secret (Slack's are).
        raise DeliveryFailed(f"{urlsplit(conf.webhook_url).netloc}: {reason}") from None


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


SENDERS = {"webhook": send_webhook, "email": send_email}
