"""Delivering one notification on one channel (jobs.alerts.channels): a signed webhook POST to a
local receiver, an e-mail through Django's backend, and each failure said as DeliveryFailed
without the webhook URL's path (often its secret)."""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import urlsplit

import pytest

from jobs.alerts.channels import SENDERS, DeliveryFailed, send_email, send_webhook
from jobs.alerts.notification import Notification
from jobs.conf import AlertsConf
from tests.support.webhook_receiver import Receiver

SECRET = "k" * 32
BODY: dict[str, Any] = {
    "text": ":rotating_light: [failed] job report is failing <http://jobs/i/7|incident #7>",
    "incident": {
        "id": 7, "kind": "failing", "reason": "failed", "opened_at": "2026-11-23T22:00:00+00:00",
        "resolved_at": None, "bad_runs": 2, "summary": "ValueError: boom",
        "url": "http://jobs/admin/jobs/incident/7/change/",
    },
    "job": {"id": 3, "name": "report", "url": "http://jobs/admin/jobs/job/3/change/"},
    "runs": {
        "first": {"id": 11},
        "last": {"id": 12, "status": "failed", "url": "http://jobs/admin/jobs/jobrun/12/change/"},
        "resolved_by": None,
    },
}  # fmt: skip
NOTIFICATION = Notification(
    idempotency_key="incident-7-opened", event="opened", body=BODY,
    subject="[jobs] FAILED: job report is failing",
    headline="[failed] job report is failing",
)  # fmt: skip


def _conf(**values: Any) -> AlertsConf:
    # The suite's receivers listen on 127.0.0.1: a loopback target, refused unless allowed.
    fields: dict[str, Any] = {
        "webhook_url": "", "webhook_secret": "", "emails": (), "public_url": "",
        "allow_private_targets": True, **values,
    }  # fmt: skip
    return AlertsConf(**fields)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_webhook_is_posted_signed_with_its_idempotency_key_and_event() -> None:
    with Receiver() as receiver:
        send_webhook(NOTIFICATION, _conf(webhook_url=receiver.url, webhook_secret=SECRET))
    (received,) = receiver.accepted()
    assert received.payload == BODY and received.signature_verifies(SECRET)
    assert received.headers["Idempotency-Key"] == "incident-7-opened"
    assert received.headers["X-Jobs-Event"] == "opened"
    assert received.headers["Content-Type"] == "application/json"


def test_a_refusing_receiver_is_a_failed_delivery_with_its_answer() -> None:
    with Receiver(fail_first=1) as receiver:
        conf = _conf(webhook_url=receiver.url, webhook_secret=SECRET)
        with pytest.raises(DeliveryFailed, match="HTTP 500 Internal Server Error: busy"):
            send_webhook(NOTIFICATION, conf)


def test_an_unreachable_receiver_is_named_by_its_host_only() -> None:
    url = f"http://127.0.0.1:{_free_port()}/services/T000/B000/secret-path"
    with pytest.raises(DeliveryFailed) as info:
        send_webhook(NOTIFICATION, _conf(webhook_url=url, webhook_secret=SECRET))
    assert str(info.value).startswith("127.0.0.1:") and "secret-path" not in str(info.value)


def test_the_email_says_what_the_incident_is_with_its_links(mailoutbox: list[Any]) -> None:
    send_email(NOTIFICATION, _conf(emails=("ops@example.com",)))
    (message,) = mailoutbox
    assert message.subject == "[jobs] FAILED: job report is failing"
    assert message.to == ["ops@example.com"]
    assert message.extra_headers["Idempotency-Key"] == "incident-7-opened"
    lines = message.body.splitlines()
    assert lines[0] == NOTIFICATION.headline  # plain: no chat markup in an e-mail
    assert "Incident #7 (failing, reason failed)" in lines and "Bad runs: 2" in lines
    assert "last run: #12 failed http://jobs/admin/jobs/jobrun/12/change/" in lines
    assert not any(line.startswith("first run") for line in lines)  # pruned: no status
    assert lines[-1] == "Job: http://jobs/admin/jobs/job/3/change/"


def test_a_failing_mail_server_is_a_failed_delivery(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: Any, fail_silently: bool = False) -> int:
        raise ConnectionRefusedError("connection refused")

    monkeypatch.setattr("django.core.mail.EmailMessage.send", refuse)
    with pytest.raises(DeliveryFailed, match="e-mail: connection refused"):
        send_email(NOTIFICATION, _conf(emails=("ops@example.com",)))


def test_each_channel_has_its_sender() -> None:
    assert {"webhook": send_webhook, "email": send_email} == SENDERS


@pytest.fixture
def resolving_to_loopback(monkeypatch: pytest.MonkeyPatch) -> str:
    """A public-looking name that resolves to 127.0.0.1 (what DNS rebinding makes of one)."""
    real = socket.getaddrinfo

    def getaddrinfo(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host == "hooks.example.com" else host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return "hooks.example.com"


def test_a_name_resolving_to_a_non_public_address_is_refused_when_sending(
    resolving_to_loopback: str,
) -> None:
    with Receiver() as receiver:
        port = urlsplit(receiver.url).port
        url = f"http://{resolving_to_loopback}:{port}/services/secret-path"
        # Accepted when read (a name), refused once resolved, before anything is sent.
        conf = _conf(webhook_url=url, webhook_secret=SECRET, allow_private_targets=False)
        with pytest.raises(DeliveryFailed, match=r"127\.0\.0\.1 \(loopback\)") as refused:
            send_webhook(NOTIFICATION, conf)
        assert receiver.received == []
        assert "secret-path" not in str(refused.value)
        # The same name and receiver, allowed: the refusal was the address's, nothing else.
        send_webhook(NOTIFICATION, _conf(webhook_url=url, webhook_secret=SECRET))
    assert len(receiver.accepted()) == 1


def test_a_redirect_is_not_followed() -> None:
    with Receiver() as elsewhere, Receiver(redirect_to=elsewhere.url) as redirecting:
        conf = _conf(webhook_url=redirecting.url, webhook_secret=SECRET)
        with pytest.raises(DeliveryFailed, match="HTTP 302"):
            send_webhook(NOTIFICATION, conf)
    assert len(redirecting.received) == 1 and elsewhere.received == []
