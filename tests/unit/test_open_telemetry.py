"""jobs.observers.open_telemetry against the OpenTelemetry SDK (an in-memory exporter) and its
Celery instrumentation: a burst message's publish span is its own trace's, and the run span
is named after the job."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jobs.observers import open_telemetry


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = CeleryInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield exporter
    finally:
        instrumentor.uninstrument()


def test_each_message_gets_a_publish_span_in_a_trace_of_its_own(
    spans: InMemorySpanExporter,
) -> None:
    first = open_telemetry.publish_span_headers("jobs.run", "jobrun-1")
    second = open_telemetry.publish_span_headers("jobs.run", "jobrun-2")
    finished = spans.get_finished_spans()
    assert [(s.name, s.kind) for s in finished] == [
        ("apply_async/jobs.run", trace.SpanKind.PRODUCER)
    ] * 2
    assert [(s.attributes or {}).get("messaging.message.id") for s in finished] == [
        "jobrun-1",
        "jobrun-2",
    ]
    # The message carries its own span's context: W3C traceparent, version-trace-span-flags.
    for headers, span in zip((first, second), finished, strict=True):
        _, trace_id, span_id, _ = headers["traceparent"].split("-")
        assert (int(trace_id, 16), int(span_id, 16)) == (
            span.context.trace_id,
            span.context.span_id,
        )
        assert span.parent is None
    assert finished[0].context.trace_id != finished[1].context.trace_id


def test_the_run_span_is_named_after_the_job(spans: InMemorySpanExporter) -> None:
    tracer = CeleryInstrumentor()._tracer  # the one its run spans come from
    with tracer.start_as_current_span("run/jobs.run"):
        open_telemetry.name_run_span("billing.close_day")
    assert [s.name for s in spans.get_finished_spans()] == ["run/billing.close_day"]


def test_without_the_instrumentation_a_run_span_is_left_alone() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer(__name__).start_as_current_span("run/jobs.run"):
        open_telemetry.name_run_span("billing.close_day")
    assert [s.name for s in exporter.get_finished_spans()] == ["run/jobs.run"]
