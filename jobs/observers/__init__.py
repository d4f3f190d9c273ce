"""What the tools a team runs around its workers see of each run, as they see it under stock
beat: Sentry (errors, Crons check-ins, traces) and OpenTelemetry (a publish span and a run span
per run, in a trace of its own). One module per tool; each is imported, and costs anything, only
once the project itself imported that tool (``sys.modules``), so without it nothing here does.

The burst path (``jobs.broker.bulk_publish``) copies one message per job shape: the trace context in
it (``TRACE_HEADERS``) is made again per message here, as the task id is. docs/works-with.md
tells what each tool sees.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from jobs.observers import open_telemetry, result_backends, sentry

# A job's schedule (a jobs.schedule.kinds value) as a beat knows it, given the job.
ScheduleOf = Callable[[Any], Any]

# The headers of a message that belong to one publish (a trace, a Crons check-in): never copied
# from one run's message to another's.
TRACE_HEADERS = (
    "traceparent",
    "tracestate",
    "baggage",
    "sentry-trace",
    "sentry-task-enqueued-time",
    "sentry-monitor-slug",
    "sentry-monitor-config",
    "sentry-monitor-check-in-id",
    "sentry-monitor-start-timestamp-s",
)


def traced(headers: Mapping[str, Any]) -> bool:
    """Whether a message with ``headers`` carries trace context that is one publish's own."""
    return any(key in headers for key in TRACE_HEADERS)


def fresh_trace(
    headers: Mapping[str, Any], task_name: str, task_id: str, job_name: str, schedule: Any
) -> dict[str, Any]:
    """New values, for one run's message, of the trace headers in ``headers`` (a template's):
    a publish span of its own (OpenTelemetry), a new trace and the job's Crons check-in
    (Sentry), as a beat makes for each run it sends."""
    fresh: dict[str, Any] = {}
    if "sentry-trace" in headers:
        fresh.update(sentry.fresh_headers(headers, job_name, schedule))
    if "traceparent" in headers:
        fresh.update(open_telemetry.publish_span_headers(task_name, task_id))
    return fresh


def beat_headers(job_name: str, schedule: Any) -> dict[str, Any]:
    """For the next run a beat publishes, as Sentry's integration of stock beat does for each
    entry it applies: a new trace started, and the job's Crons headers (its in-progress
    check-in sent) to send with the message."""
    sentry.new_beat_trace()
    return sentry.monitor_headers(job_name, schedule)


def name_run(job_name: str, task_name: str) -> None:
    """Name the running task's span and transaction after its job (``jobs.run`` runs many), and
    its result after the job's task (``task_name``), as a result backend names it under stock
    beat."""
    sentry.name_transaction(job_name)
    open_telemetry.name_run_span(job_name)
    result_backends.name_task(task_name)


def run_failed(cause: BaseException) -> None:
    """Report the exception a job's code raised, as a failing task's is reported: the task
    itself raises ``RunFailed``, one of its ``throws``, which the tools skip."""
    sentry.capture_failure(cause)
