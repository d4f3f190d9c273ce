"""The e-mail channel (jobs.alerts.channels.email): a message through Django's backend, a
failing mail server said as DeliveryFailed."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.alerts.channels import DeliveryFailed
from jobs.alerts.channels.email import EmailChannel
from tests.support.alert_notifications import NOTIFICATION


def test_the_email_says_what_the_incident_is_with_its_links(mailoutbox: list[Any]) -> None:
    EmailChannel(emails=("ops@example.com",)).send(NOTIFICATION)
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
        EmailChannel(emails=("ops@example.com",)).send(NOTIFICATION)
