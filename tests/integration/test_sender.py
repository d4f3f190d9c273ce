"""The alert sender (jobs.alerts.sender), against real PostgreSQL: it delivers the outbox under
the ``alerts`` lease, once per notification, retrying a failing receiver and dropping what no
channel is configured for."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.core import mail
from django.utils import timezone

from jobs.alerts import sender
from jobs.alerts.channels import Channel, Setting, register, unregister, webhook
from jobs.alerts.notification import Notification
from jobs.conf import get_alerts_conf
from jobs.guard import lease
from jobs.models import AlertDelivery, Incident, Job
from tests.integration.conftest import ALERT_SECRET
from tests.support.cached_settings import overriding
from tests.support.job_factory import run_here
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_sender_delivers_each_notification_once_signed_with_its_key(
    make_job: Callable[..., Job], alerts_to: Callable[..., None]
) -> None:
    job = make_job("flaky", task="tests.fail")
    with Receiver() as receiver:
        alerts_to(receiver.url, emails=("ops@example.com",))
        run_here(job)
        run_here(job)
        assert sender.drain("test-sender") == 2
        assert sender.drain("test-sender") == 0  # nothing twice
    (request,) = receiver.received
    incident = Incident.objects.get(job=job)
    assert request.signature_verifies(ALERT_SECRET)
    assert request.headers["Idempotency-Key"] == f"incident-{incident.pk}-opened"
    payload = request.payload
    assert payload["event"] == "opened" and payload["job"]["name"] == "flaky"
    assert payload["incident"]["reason"] == "failed" and payload["incident"]["bad_runs"] == 2
    assert payload["job"]["url"] == f"https://jobs.example.com/admin/jobs/job/{job.pk}/change/"
    assert payload["runs"]["last"]["status"] == "failed"
    assert "flaky" in payload["text"] and "boom from tests.fail" in payload["text"]
    (message,) = mail.outbox
    assert message.to == ["ops@example.com"] and "flaky" in message.subject
    assert message.extra_headers["Idempotency-Key"] == f"incident-{incident.pk}-opened"
    assert set(AlertDelivery.objects.values_list("state", "attempts")) == {("delivered", 1)}


def test_a_failing_receiver_is_retried_with_backoff_and_the_row_keeps_the_error(
    make_job: Callable[..., Job], alerts_to: Callable[..., None], healing: Path
) -> None:
    job = make_job(
        "flaky", task="tests.fail_until", kwargs={"healed": str(healing)}, alert_channels="webhook"
    )
    with Receiver(fail_first=1) as receiver:
        alerts_to(receiver.url)
        run_here(job)
        assert sender.drain("test-sender") == 1
        row = AlertDelivery.objects.get()
        assert (row.state, row.attempts) == ("pending", 1)
        assert row.last_error.startswith("HTTP 500") and row.next_attempt_at > timezone.now()
        # Its resolution waits behind it: an incident's opening is delivered first.
        healing.touch()
        run_here(job)
        AlertDelivery.objects.update(next_attempt_at=timezone.now())
        assert sender.drain("test-sender") == 2
    events = [r.payload["event"] for r in receiver.received]
    assert events == ["opened", "opened", "resolved"]
    keys = {r.headers["Idempotency-Key"] for r in receiver.received}
    assert len(keys) == 2
    assert set(AlertDelivery.objects.values_list("state", "attempts", "last_error")) == {
        ("delivered", 2, ""),
        ("delivered", 1, ""),
    }


def test_a_receiver_that_times_out_is_retried_and_its_secret_path_not_recorded(
    make_job: Callable[..., Job], alerts_to: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(webhook, "WEBHOOK_TIMEOUT", 0.3)
    with Receiver(delay=1.0) as receiver:
        alerts_to(receiver.url)
        run_here(make_job("flaky", task="tests.fail", alert_channels="webhook"))
        assert sender.drain("test-sender") == 1
    row = AlertDelivery.objects.get()
    assert (row.state, row.attempts) == ("pending", 1)
    assert "timed out" in row.last_error and "/hook" not in row.last_error


def test_a_channel_not_configured_is_dropped_saying_so(
    make_job: Callable[..., Job], alerts_to: Callable[..., None]
) -> None:
    alerts_to()
    run_here(make_job("flaky", task="tests.fail"))
    assert sender.drain("test-sender") == 2
    assert set(AlertDelivery.objects.values_list("state", "last_error")) == {
        ("dropped", "JOBS_ALERT_WEBHOOK_URL is not set"),
        ("dropped", "JOBS_ALERT_EMAILS is not set"),
    }


def test_one_sender_at_a_time(make_job: Callable[..., Job], alerts_to: Callable[..., None]) -> None:
    alerts_to()
    run_here(make_job("flaky", task="tests.fail"))
    held = lease.acquire(sender.LEASE_KEY, "another-sender", 30)
    assert held is not None
    assert sender.drain("test-sender") is None
    assert AlertDelivery.objects.filter(state="pending").count() == 2
    lease.release(held)
    assert sender.drain("test-sender") == 2


def test_the_thread_runs_its_checks_and_drains_only_when_something_is_due(
    make_job: Callable[..., Job], alerts_to: Callable[..., None]
) -> None:
    alerts_to()
    looks: list[str] = []
    thread = sender.AlertSender(checks=lambda: looks.append("checked"))
    thread.prepare()
    thread.step()  # nothing due: the lease is not even asked for
    assert looks == ["checked"] and lease.current_holder(sender.LEASE_KEY) is None
    run_here(make_job("flaky", task="tests.fail"))
    thread.step()
    assert looks == ["checked", "checked"]
    assert not AlertDelivery.objects.filter(state="pending").exists()
    assert sender.holder_name().startswith("alerts@")


@dataclass(frozen=True)
class InboxChannel(Channel):
    """A channel of the suite's own, as a module would add one: its class, registered, is all
    the outbox, the sender and the job's choice of channel need (no other file names it)."""

    name = "inbox"
    label = "inbox only"
    settings = (Setting("JOBS_ALERT_TEST_INBOX", None, "the suite's list of notifications"),)

    inbox: list[Notification] | None

    @classmethod
    def from_settings(cls, values: Mapping[str, Any]) -> InboxChannel:
        return cls(inbox=values["JOBS_ALERT_TEST_INBOX"])

    @property
    def configured(self) -> bool:
        return self.inbox is not None

    def send(self, notification: Notification) -> None:
        assert self.inbox is not None
        self.inbox.append(notification)


@pytest.fixture
def inbox() -> Iterator[list[Notification]]:
    """The inbox channel registered and configured for one test."""
    register(InboxChannel)
    received: list[Notification] = []
    try:
        with overriding(get_alerts_conf) as override:
            override(JOBS_ALERT_TEST_INBOX=received)
            yield received
    finally:
        unregister(InboxChannel.name)
        get_alerts_conf.cache_clear()


def test_a_channel_registered_by_its_module_alone_is_delivered_through_the_outbox(
    make_job: Callable[..., Job], inbox: list[Notification], healing: Path
) -> None:
    job = make_job(
        "flaky", task="tests.fail_until", kwargs={"healed": str(healing)}, alert_channels="inbox"
    )
    job.full_clean()  # a choice of the model's, read from the registry
    run_here(job)
    run_here(job)
    assert sender.drain("test-sender") == 1
    assert sender.drain("test-sender") == 0  # told once
    incident = Incident.objects.get(job=job)
    (opened,) = inbox
    assert opened.idempotency_key == f"incident-{incident.pk}-opened"
    assert opened.body["job"]["name"] == "flaky" and opened.body["incident"]["bad_runs"] == 2
    assert set(AlertDelivery.objects.values_list("channel", "state")) == {("inbox", "delivered")}
    # Its resolution follows on the same channel.
    healing.touch()
    run_here(job)
    assert sender.drain("test-sender") == 1
    assert [n.event for n in inbox] == ["opened", "resolved"]
    assert inbox[1].idempotency_key == f"incident-{incident.pk}-resolved"


def test_a_registered_channel_not_configured_is_dropped_naming_its_setting(
    make_job: Callable[..., Job], inbox: list[Notification]
) -> None:
    with overriding(get_alerts_conf) as override:
        override(JOBS_ALERT_TEST_INBOX=None)
        run_here(make_job("flaky", task="tests.fail", alert_channels="inbox"))
        assert sender.drain("test-sender") == 1
    assert set(AlertDelivery.objects.values_list("state", "last_error")) == {
        ("dropped", "JOBS_ALERT_TEST_INBOX is not set")
    }
