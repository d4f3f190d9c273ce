"""What a notification says (jobs.alerts.notification), delivered by the sender against real
PostgreSQL (issue 41): the cluster's words shown as written on each channel, never read as its
markup, and links that open from where they arrive, or none."""

from __future__ import annotations

import email
from collections.abc import Callable
from email.header import decode_header, make_header
from typing import Any

import pytest
from django.core import mail

from jobs.alerts import sender
from jobs.alerts.detect import open_incident
from jobs.models import AlertDelivery, Incident, Job
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.django_db(transaction=True)


def _delivered(alerts_to: Callable[..., None], **conf: Any) -> tuple[dict[str, Any], Any]:
    """The webhook's payload and the e-mail of the one notification due."""
    with Receiver() as receiver:
        alerts_to(receiver.url, emails=("ops@example.com",), **conf)
        assert sender.drain("test-sender") == 2
    (request,) = receiver.accepted()
    (message,) = mail.outbox
    return request.payload, message


def test_a_job_named_as_chat_markup_is_shown_not_read(
    make_job: Callable[..., Job], alerts_to: Callable[..., None]
) -> None:
    job = make_job("<!channel>")
    open_incident(job.pk, "failing", "failed", "KeyError: <@U024BE7LH> & @here", None)
    payload, message = _delivered(alerts_to)
    text = payload["text"]
    # Slack and Mattermost read <...> as a link or a mention (<!channel> pings everyone), & as
    # an entity, and Mattermost's @here without brackets: each is escaped.
    assert "&lt;!channel&gt;" in text and "<!channel>" not in text
    assert "&lt;@\u2060U024BE7LH&gt; &amp; @\u2060here" in text and "@here" not in text
    # The one piece of markup left is the incident's link.
    incident = Incident.objects.get()
    link = f"<https://jobs.example.com/admin/jobs/incident/{incident.pk}/change/|incident #"
    assert text.count("<") == 1 and link in text
    # The JSON's fields and the e-mail are plain text: the name as it is.
    assert payload["job"]["name"] == "<!channel>"
    assert message.body.splitlines()[0] == (
        "[failed] job <!channel> is failing: KeyError: <@U024BE7LH> & @here"
    )


def test_without_a_public_url_an_alert_carries_no_link(
    make_job: Callable[..., Job], alerts_to: Callable[..., None]
) -> None:
    job = make_job("report")
    open_incident(job.pk, "failing", "failed", "boom", None)
    payload, message = _delivered(alerts_to, public_url="")
    incident = Incident.objects.get()
    # A relative link (/admin/...) opens nowhere from a chat or a mail client: none at all.
    assert payload["text"].endswith(f" (incident #{incident.pk})") and "<" not in payload["text"]
    assert payload["incident"]["url"] is None and payload["job"]["url"] is None
    assert "/admin/" not in message.body


def test_an_email_subject_is_one_header_encoded_whatever_the_incident_holds(
    make_job: Callable[..., Job], alerts_to: Callable[..., None]
) -> None:
    job = make_job("nächtlicher-bericht")
    # A reason with a line break (a row written around the database's functions; 16 characters
    # at most) would end the Subject header and start one of its own.
    incident = Incident.objects.create(job=job, kind="failing", reason="x\r\nBcc: t@e.io")
    AlertDelivery.objects.create(incident=incident, event="opened", channel="email")
    alerts_to(emails=("ops@example.com",))
    assert sender.drain("test-sender") == 1
    (message,) = mail.outbox
    raw = message.message().as_bytes()
    raw.split(b"\n\n", 1)[0].decode("ascii")  # headers: what is not ASCII is encoded, RFC 2047
    parsed = email.message_from_bytes(raw)
    assert parsed["Bcc"] is None and message.bcc == []
    subject = str(make_header(decode_header(parsed["Subject"])))
    assert subject == "[jobs] X BCC: T@E.IO: job nächtlicher-bericht is failing"
