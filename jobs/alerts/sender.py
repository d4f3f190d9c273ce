"""The alert sender: a daemon thread in every beat and every worker node that delivers the
outbox. The ``alerts`` lease makes one of them send at a time across the cluster; its own
thread and lease keep a slow receiver from delaying maintenance or runs.

Workers run it too, so that "no live beat" (detected by the nodes, see ``jobs.alerts.detect``)
is still delivered when every beat is down.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from jobs.alerts import outbox
from jobs.alerts.channels import DELIVERY_TIMEOUT, DeliveryFailed
from jobs.alerts.notification import Notification, build
from jobs.conf import get_alerts_conf
from jobs.guard import lease
from jobs.models import Incident, JobRun
from jobs.process.background import PeriodicThread

log = logging.getLogger(__name__)

LEASE_KEY = "alerts"
LEASE_TTL = 60.0
# A row taken is hidden this long: longer than a delivery may take (then it is retried).
CLAIM_FOR = 3 * DELIVERY_TIMEOUT
# A drain gives the lease back after this long (plus the delivery under way at most), well
# within the lease's ttl.
DRAIN_FOR = LEASE_TTL / 3


def holder_name() -> str:
    return f"alerts@{socket.gethostname()}:{os.getpid()}"


def drain(holder: str) -> int | None:
    """Deliver what is due while holding the ``alerts`` lease; how many rows were handled, or
    ``None`` when another sender holds the lease."""
    held = lease.acquire(LEASE_KEY, holder, LEASE_TTL)
    if held is None:
        return None
    handled = 0
    started = time.monotonic()
    try:
        while time.monotonic() - started < DRAIN_FOR and held.locally_valid:
            # One row at a time: a row is taken only when it is about to be sent, so a slow
            # receiver never leaves taken rows waiting past their claim (and sent twice).
            due = outbox.take_due(1, CLAIM_FOR)
            if not due:
                break
            (row,) = due
            _deliver(row, _notifications(due).get((row.incident_id, row.event)))
            handled += 1
    finally:
        lease.release(held)
    return handled


def _notifications(due: list[outbox.Due]) -> dict[tuple[int, str], Notification]:
    incidents = Incident.objects.select_related("job").in_bulk({row.incident_id for row in due})
    run_ids = {
        run_id
        for incident in incidents.values()
        for run_id in (incident.first_run_id, incident.last_run_id, incident.resolved_by_run_id)
        if run_id is not None
    }
    runs = JobRun.objects.in_bulk(run_ids)
    return {
        (row.incident_id, row.event): build(incidents[row.incident_id], row.event, runs)
        for row in due
        if row.incident_id in incidents
    }


def _deliver(row: outbox.Due, notification: Notification | None) -> None:
    conf = get_alerts_conf()
    extra = {
        "action": "alert_delivery",
        "delivery_id": row.delivery_id,
        "incident_id": row.incident_id,
        "event": row.event,
        "channel": row.channel,
        "attempt": row.attempts,
    }
    if notification is None:  # its incident was deleted with its job meanwhile (cascade)
        return
    channel = conf.backend(row.channel)
    if channel is None or not channel.configured:
        why = "unknown channel" if channel is None else channel.not_configured
        outbox.mark_dropped(row.delivery_id, why)
        return
    try:
        channel.send(notification)
    except DeliveryFailed as exc:
        state = outbox.retry_later(row.delivery_id, row.attempts, str(exc))
        log.warning(
            "alert %s of incident %d via %s failed (attempt %d%s): %s",
            row.event,
            row.incident_id,
            row.channel,
            row.attempts,
            ", given up" if state == "failed" else "",
            exc,
            extra={**extra, "action": "alert_delivery_failed"},
        )
        return
    outbox.mark_delivered(row.delivery_id)
    log.info(
        "alert %s of incident %d delivered via %s",
        row.event,
        row.incident_id,
        row.channel,
        extra={**extra, "action": "alert_delivered"},
    )


class AlertSender(PeriodicThread):
    """Drains the outbox every ``interval`` seconds; ``checks`` run before each look (the
    cluster checks of a worker node)."""

    name = "jobs-alerts"

    def __init__(self, interval: float = 1.0, checks: Callable[[], Any] | None = None) -> None:
        super().__init__(interval)
        self._checks = checks
        self._holder = ""

    def prepare(self) -> None:
        self._holder = holder_name()  # in the process that runs the thread

    def step(self) -> None:
        if self._checks is not None:
            self._checks()
        if outbox.any_due():
            drain(self._holder)
