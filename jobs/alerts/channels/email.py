"""The e-mail channel: a plain-text message through Django's e-mail backend (its ``EMAIL_*``
settings and ``DEFAULT_FROM_EMAIL``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.core.mail import EmailMessage
from django.core.validators import validate_email

from jobs.alerts.channels.base import (
    IDEMPOTENCY_HEADER,
    Channel,
    DeliveryFailed,
    Setting,
    register,
)

if TYPE_CHECKING:
    from jobs.alerts.notification import Notification

EMAILS_SETTING = "JOBS_ALERT_EMAILS"


@register
@dataclass(frozen=True)
class EmailChannel(Channel):
    name = "email"
    label = "e-mail only"
    settings = (
        Setting(
            EMAILS_SETTING,
            (),
            "comma-separated addresses e-mailed each incident (`EMAIL_*`, `DEFAULT_FROM_EMAIL`: "
            "Django's)",
        ),
    )

    emails: tuple[str, ...]

    def __post_init__(self) -> None:
        for address in self.emails:
            try:
                validate_email(address)
            except ValidationError:
                raise ImproperlyConfigured(
                    f"{EMAILS_SETTING}: {address!r} is not an e-mail address."
                ) from None

    @classmethod
    def from_settings(cls, values: Mapping[str, Any]) -> EmailChannel:
        return cls(emails=tuple(values[EMAILS_SETTING]))

    @property
    def configured(self) -> bool:
        return bool(self.emails)

    def send(self, notification: Notification) -> None:
        message = EmailMessage(
            subject=notification.subject,
            body=_email_body(notification),
            from_email=settings.DEFAULT_FROM_EMAIL,
            to=list(self.emails),
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
