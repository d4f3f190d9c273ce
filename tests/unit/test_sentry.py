"""jobs.observers.sentry against sentry-sdk with a capturing transport and its Celery
integration: a job's own exception captured as the integration captures a task's, a new trace
per run's message, the transaction named after the job; nothing at all without the
integration."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sentry_sdk
from celery import current_app
from django_celery_beat.models import CrontabSchedule, IntervalSchedule
from sentry_sdk.envelope import Envelope
from sentry_sdk.integrations.celery import CeleryIntegration
from sentry_sdk.integrations.celery.beat import _get_monitor_config
from sentry_sdk.transport import Transport

from jobs.observers import sentry
from jobs.schedule.kinds import At, Cron, Every


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


def _check_ins(transport: CapturingTransport) -> list[dict[str, Any]]:
    return [
        item.payload.json
        for env in transport.envelopes
        for item in env.items
        if item.type == "check_in" and item.payload.json is not None
    ]


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
    first = sentry.fresh_headers(template, "j", Every(3600))
    second = sentry.fresh_headers(template, "j", Every(3600))
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


@pytest.mark.parametrize(
    ("schedule", "stock"),
    [
        (Every(3600), lambda: IntervalSchedule(every=1, period=IntervalSchedule.HOURS)),
        (Every(90 * 60), lambda: IntervalSchedule(every=90, period=IntervalSchedule.MINUTES)),
        (Cron("30 3 * * 1-5", "Europe/Paris"), lambda: CrontabSchedule(
            minute="30", hour="3", day_of_week="1-5", timezone=ZoneInfo("Europe/Paris"),
        )),
    ],
)  # fmt: skip
def test_a_monitor_is_configured_as_sentry_configures_stock_beats(
    captured: CapturingTransport, schedule: Any, stock: Any
) -> None:
    """The in-progress check-in and the monitor's slug and config are those Sentry sends for
    django-celery-beat's row of the same schedule under stock beat."""
    headers = sentry.monitor_headers("billing.close_day", schedule)
    (check_in,) = _check_ins(captured)
    expected = _get_monitor_config(stock().schedule, current_app, "billing.close_day")
    assert headers["sentry-monitor-config"] == check_in["monitor_config"] == expected
    assert (check_in["monitor_slug"], check_in["status"]) == ("billing.close_day", "in_progress")
    assert headers["sentry-monitor-check-in-id"] == check_in["check_in_id"]


def test_a_schedule_crons_cannot_monitor_sends_no_check_in(captured: CapturingTransport) -> None:
    assert sentry.monitor_headers("every-ten-seconds", Every(10)) == {}
    assert sentry.monitor_headers("once", At(datetime(2100, 1, 1, tzinfo=UTC))) == {}
    assert captured.envelopes == []


def test_each_message_of_a_monitored_template_checks_in_for_its_own_job(
    captured: CapturingTransport,
) -> None:
    template = {"sentry-trace": "a-b", "sentry-monitor-slug": "sample", "headers": {"k": 1}}
    hourly = sentry.fresh_headers(template, "hourly", Every(3600))
    assert hourly["sentry-monitor-slug"] == hourly["headers"]["sentry-monitor-slug"] == "hourly"
    check_ins = _check_ins(captured)
    assert [c["check_in_id"] for c in check_ins] == [hourly["sentry-monitor-check-in-id"]]
    # A job of the same shape whose schedule Crons cannot monitor: its message has none.
    fast = sentry.fresh_headers(template, "fast", Every(10))
    assert fast["sentry-monitor-slug"] is None and "sentry-monitor-slug" not in fast["headers"]
