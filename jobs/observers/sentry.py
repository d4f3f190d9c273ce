"""Sentry, as its Celery integration sees stock beat: a new trace per scheduled run, the
transaction named after the job, a failing job's own exception captured once."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from functools import lru_cache
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


def fresh_headers(headers: Mapping[str, Any], job_name: str, schedule: Any) -> dict[str, Any]:
    """A template message's Sentry headers made anew for a run of ``job_name``: a new trace,
    sent now, and the job's Crons check-in when the template has one."""
    import sentry_sdk

    new_beat_trace()
    fresh: dict[str, Any] = dict(sentry_sdk.get_isolation_scope().iter_trace_propagation_headers())
    now = time.time()
    if "sentry-task-enqueued-time" in headers:
        fresh["sentry-task-enqueued-time"] = now
    if "sentry-monitor-slug" in headers:
        # A job of the template's shape whose schedule Crons cannot monitor sends none.
        fresh.update(dict.fromkeys(_MONITOR_HEADERS, None) | monitor_headers(job_name, schedule))
        if fresh["sentry-monitor-slug"] is not None:
            fresh["sentry-monitor-start-timestamp-s"] = "%.9f" % now  # noqa: UP031  (as Sentry)
    # Sentry's integration reads them on the worker from the inner "headers" too.
    inner = headers.get("headers")
    if isinstance(inner, dict):
        fresh["headers"] = {k: v for k, v in {**inner, **fresh}.items() if v is not None}
    return fresh


_MONITOR_HEADERS = (
    "sentry-monitor-slug",
    "sentry-monitor-config",
    "sentry-monitor-check-in-id",
    "sentry-monitor-start-timestamp-s",
)


def monitor_headers(job_name: str, schedule: Any) -> dict[str, Any]:
    """As Sentry's wrapper of ``Scheduler.apply_entry`` with ``monitor_beat_tasks``: the job's
    in-progress check-in sent, and the headers that make the worker send its ok or error one;
    none for a schedule Sentry Crons does not monitor (as for stock beat's)."""
    integration = _integration()
    if integration is None or not integration.monitor_beat_tasks:
        return {}
    from sentry_sdk.crons import MonitorStatus, capture_checkin
    from sentry_sdk.utils import match_regex_list

    if match_regex_list(job_name, integration.exclude_beat_tasks):
        return {}
    config = _monitor_config(job_name, schedule)
    if not config:
        return {}
    check_in_id = capture_checkin(
        monitor_slug=job_name, monitor_config=config,  # type: ignore[arg-type]  # Sentry's own
        status=MonitorStatus.IN_PROGRESS,
    )  # fmt: skip
    return {
        "sentry-monitor-slug": job_name,
        "sentry-monitor-config": config,
        "sentry-monitor-check-in-id": check_in_id,
    }


@lru_cache(maxsize=4096)
def _monitor_config(job_name: str, schedule: Any) -> dict[str, Any]:
    """The monitor's config as Sentry derives it for stock beat, from the Celery schedule
    django-celery-beat would give the same row."""
    from celery import current_app
    from sentry_sdk.integrations.celery.beat import _get_monitor_config

    celery_schedule = _celery_schedule(schedule)
    if celery_schedule is None:
        return {}
    return dict(_get_monitor_config(celery_schedule, current_app, job_name))


def _celery_schedule(schedule: Any) -> Any:
    # Sentry reads Celery's schedule types: an interval, or django-celery-beat's crontab in
    # its zone. One-off and solar schedules it does not monitor (stock beat's neither).
    from datetime import timedelta
    from zoneinfo import ZoneInfo

    from celery.schedules import schedule as interval
    from django_celery_beat.tzcrontab import TzAwareCrontab

    from jobs.schedule.kinds import Cron, Every

    if isinstance(schedule, Every):
        return interval(timedelta(seconds=schedule.seconds))
    if isinstance(schedule, Cron):
        minute, hour, day_of_month, month_of_year, day_of_week = schedule.fields
        return TzAwareCrontab(
            minute=minute, hour=hour, day_of_month=day_of_month,
            month_of_year=month_of_year, day_of_week=day_of_week, tz=ZoneInfo(schedule.tz),
        )  # fmt: skip
    return None


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
