"""OpenTelemetry, as its Celery instrumentation sees stock beat: a publish span per message in
a trace of its own, whose context the message carries, and a run span named after the job."""

from __future__ import annotations

import sys
from typing import Any

_INSTRUMENTATION = "opentelemetry.instrumentation.celery"


def _instrumented() -> bool:
    if _INSTRUMENTATION not in sys.modules:
        return False
    from opentelemetry.instrumentation.celery import CeleryInstrumentor

    return bool(CeleryInstrumentor().is_instrumented_by_opentelemetry)


def publish_span_headers(task_name: str, task_id: str) -> dict[str, Any]:
    """The publish span the instrumentation makes for a message (``apply_async/<task>``), made
    and ended here for one message of a burst; the trace context to send with it."""
    from opentelemetry import propagate, trace
    from opentelemetry.context import Context
    from opentelemetry.instrumentation.celery import CeleryInstrumentor

    # The instrumentation's own tracer (its tracer provider), else the global one's.
    tracer = getattr(CeleryInstrumentor(), "_tracer", None) or trace.get_tracer(_INSTRUMENTATION)
    # A root: each run a trace of its own, as each publish of a beat is.
    span = tracer.start_span(
        f"apply_async/{task_name}", context=Context(), kind=trace.SpanKind.PRODUCER
    )
    if span.is_recording():
        span.set_attribute("celery.action", "apply_async")
        span.set_attribute("messaging.message.id", task_id)
        span.set_attribute("celery.task_name", task_name)
    carrier: dict[str, Any] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    span.end()
    return carrier


def name_run_span(job_name: str) -> None:
    """The running task's span (``run/<task>``) named ``run/<job>``."""
    if not _instrumented():
        return
    from opentelemetry import trace

    trace.get_current_span().update_name(f"run/{job_name}")
