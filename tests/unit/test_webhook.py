"""The webhook channel (jobs.alerts.channels.webhook): a signed POST to a local receiver, each
failure said as DeliveryFailed without the webhook URL's path (often its secret)."""

from __future__ import annotations

import hashlib
import hmac
import socket
from typing import Any
from urllib.parse import urlsplit

import pytest

from jobs.alerts.channels import DeliveryFailed
from jobs.alerts.channels.webhook import WebhookChannel, sign
from tests.support.alert_notifications import BODY, NOTIFICATION, SECRET
from tests.support.webhook_receiver import Receiver


def _webhook(
    webhook_url: str, webhook_secret: str, allow_private_targets: bool = True
) -> WebhookChannel:
    # The suite's receivers listen on 127.0.0.1: a loopback target, refused unless allowed.
    return WebhookChannel(webhook_url, webhook_secret, allow_private_targets)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_webhook_is_posted_signed_with_its_idempotency_key_and_event() -> None:
    with Receiver() as receiver:
        _webhook(webhook_url=receiver.url, webhook_secret=SECRET).send(NOTIFICATION)
    (received,) = receiver.accepted()
    assert received.payload == BODY and received.signature_verifies(SECRET)
    assert received.headers["Idempotency-Key"] == "incident-7-opened"
    assert received.headers["X-Jobs-Event"] == "opened"
    assert received.headers["Content-Type"] == "application/json"


def test_a_refusing_receiver_is_a_failed_delivery_with_its_answer() -> None:
    with Receiver(fail_first=1) as receiver:
        webhook = _webhook(webhook_url=receiver.url, webhook_secret=SECRET)
        with pytest.raises(DeliveryFailed, match="HTTP 500 Internal Server Error: busy"):
            webhook.send(NOTIFICATION)


def test_an_unreachable_receiver_is_named_by_its_host_only() -> None:
    url = f"http://127.0.0.1:{_free_port()}/services/T000/B000/secret-path"
    with pytest.raises(DeliveryFailed) as info:
        _webhook(webhook_url=url, webhook_secret=SECRET).send(NOTIFICATION)
    assert str(info.value).startswith("127.0.0.1:") and "secret-path" not in str(info.value)


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
        webhook = _webhook(webhook_url=url, webhook_secret=SECRET, allow_private_targets=False)
        with pytest.raises(DeliveryFailed, match=r"127\.0\.0\.1 \(loopback\)") as refused:
            webhook.send(NOTIFICATION)
        assert receiver.received == []
        assert "secret-path" not in str(refused.value)
        # The same name and receiver, allowed: the refusal was the address's, nothing else.
        _webhook(webhook_url=url, webhook_secret=SECRET).send(NOTIFICATION)
    assert len(receiver.accepted()) == 1


def test_a_redirect_is_not_followed() -> None:
    with Receiver() as elsewhere, Receiver(redirect_to=elsewhere.url) as redirecting:
        webhook = _webhook(webhook_url=redirecting.url, webhook_secret=SECRET)
        with pytest.raises(DeliveryFailed, match="HTTP 302"):
            webhook.send(NOTIFICATION)
    assert len(redirecting.received) == 1 and elsewhere.received == []


def test_the_signature_is_the_hmac_sha256_of_the_raw_body() -> None:
    body = b'{"event": "opened"}'
    expected = hmac.new(b"secret", body, hashlib.sha256).hexdigest()
    assert sign(body, "secret") == f"sha256={expected}"
