"""The channels (jobs.alerts.channels and its base): each has its sender."""

from __future__ import annotations

from jobs.alerts.channels import SENDERS, send_email, send_webhook


def test_each_channel_has_its_sender() -> None:
    assert {"webhook": send_webhook, "email": send_email} == SENDERS
