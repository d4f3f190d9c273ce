"""Delivering one notification on one channel: a signed webhook POST (:mod:`.webhook`), or an
e-mail through Django's e-mail backend (:mod:`.email`). Each raises :class:`DeliveryFailed`
saying why, and never waits longer than its timeout, so a slow receiver delays only the alerts
behind it."""

from __future__ import annotations

from jobs.alerts.channels.base import DeliveryFailed
from jobs.alerts.channels.email import send_email
from jobs.alerts.channels.webhook import WEBHOOK_TIMEOUT, send_webhook

__all__ = ["SENDERS", "WEBHOOK_TIMEOUT", "DeliveryFailed", "send_email", "send_webhook"]

SENDERS = {"webhook": send_webhook, "email": send_email}
