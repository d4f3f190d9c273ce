"""The alert settings (issue 14): validated once at start, each error naming its variable, and
the webhook secret never shown."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from jobs.alerts.channels.email import EmailChannel
from jobs.alerts.channels.webhook import WebhookChannel, sign
from jobs.conf import AlertsConf

SECRET = "k" * 32


def _conf(
    webhook_url: str = "",
    webhook_secret: str = "",
    emails: tuple[str, ...] = (),
    public_url: str = "",
    allow_private_targets: bool = False,
) -> AlertsConf:
    """The alert settings as ``jobs.conf.get_alerts_conf`` reads them into each channel."""
    webhook = WebhookChannel(webhook_url, webhook_secret, allow_private_targets)
    return AlertsConf(public_url=public_url, backends=(webhook, EmailChannel(emails)))


def _webhook_url(conf: AlertsConf) -> str:
    webhook = conf.backend("webhook")
    assert isinstance(webhook, WebhookChannel)
    return webhook.url


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"webhook_url": "ftp://x/hook", "webhook_secret": SECRET}, "JOBS_ALERT_WEBHOOK_URL"),
        ({"webhook_url": "http:///hook", "webhook_secret": SECRET}, "JOBS_ALERT_WEBHOOK_URL"),
        ({"webhook_url": "https://h/hook", "webhook_secret": "short"}, "JOBS_ALERT_WEBHOOK_SECRET"),
        ({"webhook_url": "https://h/hook"}, "JOBS_ALERT_WEBHOOK_SECRET"),
        ({"emails": ("ops@example.com", "not an address")}, "JOBS_ALERT_EMAILS"),
        ({"public_url": "jobs.example.com"}, "JOBS_PUBLIC_URL"),
    ],
)
def test_a_bad_value_is_refused_naming_its_variable(values: dict[str, Any], named: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=named):
        _conf(**values)


def test_the_secret_is_not_shown_in_errors_or_the_value() -> None:
    secret = "the-secret-value"
    with pytest.raises(ImproperlyConfigured) as refused:
        _conf(webhook_url="https://h/hook", webhook_secret=secret)
    assert secret not in str(refused.value)
    conf = _conf(webhook_url="https://h/hook", webhook_secret=SECRET + "-distinct")
    assert SECRET not in repr(conf)


def test_the_channels_configured() -> None:
    assert _conf().channels == frozenset()
    both = _conf(webhook_url="https://h/hook", webhook_secret=SECRET, emails=("a@b.example",))
    assert both.channels == {"webhook", "email"}


def test_the_signature_is_the_hmac_sha256_of_the_body() -> None:
    # The published test vector of RFC 4231 (test case 2).
    expected = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    assert sign(b"what do ya want for nothing?", "Jefe") == f"sha256={expected}"


@pytest.mark.parametrize(
    ("host", "kind"),
    [
        ("169.254.169.254", "link-local"),  # a cloud's metadata service
        ("127.0.0.1:6379", "loopback"),  # the broker
        ("[::1]", "loopback"),
        ("[::ffff:127.0.0.1]", "loopback"),
        ("localhost:8000", "loopback name"),
        ("10.1.2.3", "private"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("[fe80::1]", "link-local"),
        ("[fd00::1]", "private"),
        ("100.64.0.1", "non-public"),  # shared address space (carrier-grade NAT)
    ],
)
def test_a_webhook_to_a_non_public_address_is_refused_naming_the_setting(
    host: str, kind: str
) -> None:
    url = f"http://{host}/services/T0/B0/secret-path"
    with pytest.raises(ImproperlyConfigured, match="JOBS_ALERT_WEBHOOK_URL") as refused:
        _conf(webhook_url=url, webhook_secret=SECRET)
    message = str(refused.value)
    assert kind in message and "JOBS_ALERT_ALLOW_PRIVATE_TARGETS" in message
    assert "secret-path" not in message  # the host only: the path is often the secret
    allowed = _conf(webhook_url=url, webhook_secret=SECRET, allow_private_targets=True)
    assert _webhook_url(allowed) == url


def test_a_webhook_to_a_public_address_or_a_name_is_accepted() -> None:
    for url in ("https://hooks.slack.com/services/T/B/x", "https://93.184.215.14/hook"):
        assert _webhook_url(_conf(webhook_url=url, webhook_secret=SECRET)) == url
