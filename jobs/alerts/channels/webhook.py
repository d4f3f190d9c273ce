"""The webhook channel: a signed JSON POST, to public addresses only (``jobs.alerts.targets``)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from jobs.alerts.channels.base import DeliveryFailed
from jobs.alerts.notification import IDEMPOTENCY_HEADER, SIGNATURE_HEADER, Notification, sign
from jobs.alerts.targets import open_checked
from jobs.conf import AlertsConf

WEBHOOK_TIMEOUT = 10.0  # seconds, connect and each read


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
