"""Sentry, as its Celery integration sees stock beat: a new trace per scheduled run, the
transaction named after the job, a failing job's own exception captured once."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any


def _integration() -> Any:
    """Sentry's Celery integration when the project set Sentry up with it, else None."""
    if "sentry_sdk" not in sys.modules:
        return None
    import sentry_sdk
    from sentry_sdk.integrations.celery import CeleryIntegration

    return sentry_sdk.get_client().get_integration(CeleryIntegration)


def new_beat_trace() -> None:
    """As Sentry's wrapper of ``Scheduler.apply_entry``: the next message a beat sends starts a
    new trace, and is sent as the beat's (no submit span of its own)."""
    if _integration() is None:
        return
    import sentry_sdk

    scope = sentry_sdk.get_isolation_scope()
    scope.set_new_propagation_context()
    scope._name = "celery-beat"  # what Sentry's own wrapper names it (its send_task reads it)


def fresh_headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    """A template message's Sentry trace headers made anew: a new trace, sent now."""
    import sentry_sdk

    new_beat_trace()
    fresh: dict[str, Any] = dict(sentry_sdk.get_isolation_scope().iter_trace_propagation_headers())
    if "sentry-task-enqueued-time" in headers:
        fresh["sentry-task-enqueued-time"] = time.time()
    # Sentry's integration reads them on the worker from the inner "headers" too.
    inner = headers.get("headers")
    if isinstance(inner, dict):
        fresh["headers"] = {**inner, **fresh}
    return fresh


def name_transaction(job_name: str) -> None:
    if _integration() is None:
        return
    import sentry_sdk
    from sentry_sdk.tracing import TransactionSource

    sentry_sdk.get_current_scope().set_transaction_name(job_name, source=TransactionSource.TASK)


def capture_failure(cause: BaseException) -> None:
    if _integration() is None:
        return
    import sentry_sdk
    from sentry_sdk.utils import event_from_exception

    client = sentry_sdk.get_client()
    # As the integration reports a failing task's exception (unhandled, mechanism celery).
    event, hint = event_from_exception(
        cause, client_options=client.options, mechanism={"type": "celery", "handled": False}
    )
    sentry_sdk.capture_event(event, hint=hint)
