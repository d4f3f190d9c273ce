"""jobs.observers.sentry against sentry-sdk with a capturing transport and its Celery
integration: a job's own exception captured as the integration captures a task's, a new trace
per run's message, the transaction named after the job; nothing at all without the
integration."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.integrations.celery import CeleryIntegration
from sentry_sdk.transport import Transport

from jobs.observers import sentry


class CapturingTransport(Transport):
    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.envelopes: list[Envelope] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        self.envelopes.append(envelope)


@pytest.fixture
def captured() -> Iterator[CapturingTransport]:
    transport = CapturingTransport()
    sentry_sdk.init(
        dsn="https://public@sentry.invalid/1", transport=transport,
        integrations=[CeleryIntegration(monitor_beat_tasks=True)], traces_sample_rate=1.0,
    )  # fmt: skip
    try:
        yield transport
    finally:
        sentry_sdk.init(dsn=None)


def _raised() -> ValueError:
    try:
        raise ValueError("the ledger does not balance")
    except ValueError as exc:
        return exc


def test_a_jobs_exception_is_captured_as_itself_unhandled(captured: CapturingTransport) -> None:
    sentry.capture_failure(_raised())
    (event,) = [e for env in captured.envelopes if (e := env.get_event()) is not None]
    (exception,) = event["exception"]["values"]
    assert (exception["type"], exception["value"]) == ("ValueError", "the ledger does not balance")
    assert exception["mechanism"] == {"type": "celery", "handled": False}
    assert any(frame["function"] == "_raised" for frame in exception["stacktrace"]["frames"])


def test_each_message_starts_a_trace_of_its_own(captured: CapturingTransport) -> None:
    template = {"sentry-trace": "a-b", "baggage": "x", "headers": {"sentry-trace": "a-b", "k": 1}}
    first, second = sentry.fresh_headers(template), sentry.fresh_headers(template)
    trace_ids = {first["sentry-trace"].split("-")[0], second["sentry-trace"].split("-")[0]}
    assert len(trace_ids) == 2
    assert first["headers"]["sentry-trace"] == first["sentry-trace"]  # read there by workers
    assert first["headers"]["k"] == 1
    assert f"sentry-trace_id={first['sentry-trace'].split('-')[0]}" in first["baggage"]


def test_the_transaction_is_named_after_the_job(captured: CapturingTransport) -> None:
    with sentry_sdk.start_transaction(name="jobs.run"):
        sentry.name_transaction("billing.close_day")
    (transaction,) = [e for env in captured.envelopes if (e := env.get_transaction_event())]
    assert transaction["transaction"] == "billing.close_day"


def test_without_the_integration_nothing_is_sent() -> None:
    transport = CapturingTransport()
    sentry_sdk.init(dsn="https://public@sentry.invalid/1", transport=transport,
                    default_integrations=False)  # fmt: skip
    try:
        sentry.capture_failure(_raised())
        sentry.new_beat_trace()
    finally:
        sentry_sdk.init(dsn=None)
    assert transport.envelopes == []
