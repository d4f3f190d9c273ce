"""The webhook channel: each notification's JSON body POSTed, signed with HMAC-SHA256, to public
addresses only (:mod:`jobs.alerts.targets`)."""

from __future__ import annotations

import hashlib
import hmac
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from jobs.alerts.channels.base import (
    DELIVERY_TIMEOUT,
    IDEMPOTENCY_HEADER,
    Channel,
    DeliveryFailed,
    Setting,
    register,
)
from jobs.alerts.targets import (
    ALLOW_SETTING,
    configured_host_problem,
    open_checked,
    require_http_url,
)

if TYPE_CHECKING:
    from jobs.alerts.notification import Notification

URL_SETTING = "JOBS_ALERT_WEBHOOK_URL"
SECRET_SETTING = "JOBS_ALERT_WEBHOOK_SECRET"
SIGNATURE_HEADER = "X-Jobs-Signature"
WEBHOOK_TIMEOUT = DELIVERY_TIMEOUT  # seconds, connect and each read
# Shorter secrets can be guessed from one signed body; 32 characters of a random string are not.
MIN_WEBHOOK_SECRET_LENGTH = 32


def sign(body: bytes, secret: str) -> str:
    """The signature header's value: ``sha256=`` and the HMAC-SHA256 of the raw body, in hex."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@register
@dataclass(frozen=True)
class WebhookChannel(Channel):
    name = "webhook"
    label = "webhook only"
    settings = (
        Setting(URL_SETTING, "", "where incidents are posted ([alerts](alerts.md))"),
        Setting(
            SECRET_SETTING,
            "",
            "the secret (at least 32 characters, required with the URL) their HMAC signature is "
            "made with ([alerts](alerts.md))",
        ),
        Setting(
            ALLOW_SETTING,
            False,
            "`1`: a webhook may be posted to a loopback, private, link-local or other non-public "
            "address ([security](security.md))",
            "refused",
        ),
    )

    url: str
    # Never shown: not in the repr, not in a log line, not in an error message.
    secret: str = field(repr=False)
    # Webhooks to loopback, link-local, private and other non-public addresses (jobs.alerts.
    # targets): refused unless allowed, e.g. for a receiver on the same host.
    allow_private_targets: bool = False

    def __post_init__(self) -> None:
        if not self.url:
            return
        require_http_url(URL_SETTING, self.url)
        self._check_host()
        if len(self.secret) < MIN_WEBHOOK_SECRET_LENGTH:
            raise ImproperlyConfigured(
                f"{SECRET_SETTING} must be set to a random string of at least "
                f"{MIN_WEBHOOK_SECRET_LENGTH} characters when {URL_SETTING} is: "
                "every notification is signed with it."
            )

    def _check_host(self) -> None:
        host = urlsplit(self.url).hostname or ""
        problem = None if self.allow_private_targets else configured_host_problem(host)
        if problem is not None:
            # The host only: a webhook URL's path is often its secret.
            raise ImproperlyConfigured(
                f"{URL_SETTING}: {problem}; alerts are posted to public addresses "
                f"only, unless {ALLOW_SETTING} is set (docs/security.md)."
            )

    @classmethod
    def from_settings(cls, values: Mapping[str, Any]) -> WebhookChannel:
        return cls(
            url=str(values[URL_SETTING]),
            secret=str(values[SECRET_SETTING]),
            allow_private_targets=bool(values[ALLOW_SETTING]),
        )

    @property
    def configured(self) -> bool:
        return bool(self.url)

    def send(self, notification: Notification) -> None:
        body = json.dumps(notification.body, sort_keys=True).encode()
        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "User-Agent": "clusterjobs-alerts",
                IDEMPOTENCY_HEADER: notification.idempotency_key,
                "X-Jobs-Event": notification.event,
                SIGNATURE_HEADER: sign(body, self.secret),
            },
        )
        try:
            opened = open_checked(
                request, WEBHOOK_TIMEOUT, allow_private=self.allow_private_targets
            )
            with opened as response:
                response.read(1024)
        except urllib.error.HTTPError as exc:
            detail = exc.read(300).decode(errors="replace").strip()
            raise DeliveryFailed(f"HTTP {exc.code} {exc.reason}: {detail}".rstrip(": ")) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            # The host only: a webhook URL's path is often its secret (Slack's are).
            raise DeliveryFailed(f"{urlsplit(self.url).netloc}: {reason}") from None
