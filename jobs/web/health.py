"""Health: the probes (``/livez``, ``/readyz``, ``/healthz``).

- ``/livez``: the web process answers. No I/O, so a slow database never restarts the web.
- ``/readyz``: this web process can serve: the database and the broker answer.
- ``/healthz``: the cluster works: database, broker, at least one live beat and one live node,
  with details as JSON. 200 when all hold, else 503.

``/readyz`` and ``/healthz`` answer everyone their status (``{"status": "ok"}`` or
``"failing"``, and the code); the checks' details only a client ``jobs.web.access`` lets see the
internals.

Beats are judged by the heartbeat rows they write (``jobs.beat.heartbeat``); ages by the database
clock.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import timedelta
from functools import wraps
from typing import Any, TypeVar

from celery import current_app
from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse

from jobs.beat import switch_report
from jobs.conf import get_ops_conf
from jobs.continuous.nodes import Liveness, unconsumed_queues, with_liveness
from jobs.database import pooler_hint
from jobs.database.database_clock import age_of
from jobs.models import BeatHeartbeat, ConfigurationProblem, Node, ScheduleError
from jobs.web import access

log = logging.getLogger(__name__)

BROKER_TIMEOUT_SECONDS = 2
# A probe's details list at most this many beats and nodes (the counts are always exact).
LISTED = 20

T = TypeVar("T")


# --- checks ------------------------------------------------------------------------------------

Check = dict[str, Any]


def _timed(probe: Callable[[], Check]) -> Check:
    started = time.perf_counter()
    try:
        result = probe()
    except Exception as exc:  # a probe reports any failure; it must never raise
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    result["seconds"] = round(time.perf_counter() - started, 4)
    return result


def check_database() -> Check:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError:
        connection.close()  # the next request reconnects instead of reusing a broken link
        raise
    return {"ok": True, "vendor": connection.vendor}


def check_broker() -> Check:
    """Connect to the broker (never printing its URL, which may hold a password)."""
    with current_app.connection_for_write(connect_timeout=BROKER_TIMEOUT_SECONDS) as conn:
        conn.ensure_connection(
            max_retries=1, interval_start=0, interval_step=0, timeout=BROKER_TIMEOUT_SECONDS
        )
        return {"ok": True, "transport": conn.transport.driver_type}


def _seconds(age: timedelta) -> float:
    return round(age.total_seconds(), 3)


def check_beats() -> Check:
    stale = get_ops_conf().beat_stale_after
    beats = (
        BeatHeartbeat.objects.annotate(age=age_of("last_seen"))
        .filter(age__lt=timedelta(seconds=stale))
        .order_by("age")
    )
    live = [
        {"name": beat.name, "last_seen": beat.last_seen, "age_seconds": _seconds(beat.age)}
        for beat in beats[:LISTED]
    ]
    count = len(live) if len(live) < LISTED else beats.count()
    return {"ok": count > 0, "live": count, "stale_after_seconds": stale, "beats": live}


def check_nodes() -> Check:
    """Live nodes, as ``jobs.continuous.nodes`` judges them (missed heartbeats, database clock)."""
    nodes = (
        with_liveness(Node.objects.all())
        .filter(liveness=Liveness.ALIVE)
        .annotate(age=age_of("last_heartbeat"))
        .order_by("age")
    )
    live = [
        {
            "name": node.name,
            "queues": node.queues,
            "last_heartbeat": node.last_heartbeat,
            "age_seconds": _seconds(node.age),
        }
        for node in nodes[:LISTED]
    ]
    count = len(live) if len(live) < LISTED else nodes.count()
    return {"ok": count > 0, "live": count, "nodes": live}


def check_schedules() -> Check:
    """Jobs no beat can schedule (``jobs.beat.schedule_errors``). The cluster still works, so this
    check never fails the probe; it names the broken jobs and why."""
    broken = ScheduleError.objects.select_related("job").order_by("job__name")
    listed = [
        {"job": row.job.name, "error": row.error, "detected_at": row.detected_at}
        for row in broken[:LISTED]
    ]
    count = len(listed) if len(listed) < LISTED else broken.count()
    # Declared periodic tasks that are not jobs at all (jobs.beat.switch_report).
    not_carried = [
        {"source": line.source, "name": line.name, "task": line.task, "reason": line.reason}
        for line in switch_report.not_carried()
    ]
    return {
        "ok": True,
        "broken": count,
        "jobs": listed,
        "not_carried": len(not_carried),
        "declared_not_carried": not_carried[:LISTED],
    }


def check_queues() -> Check:
    """Queues that enabled jobs publish to and no live worker consumes
    (``nodes.unconsumed_queues``): their runs wait until they miss their start deadline (a
    worker started without ``-Q`` consumes only Celery's default queue; a Django task's is
    ``default``). Never fails the probe: a queue kept for workers started on demand is not a
    broken cluster."""
    waiting = unconsumed_queues()
    listed = [{"queue": queue, "jobs": jobs} for queue, jobs in waiting[:LISTED]]
    return {"ok": True, "unconsumed": len(waiting), "queues": listed}


# A problem row older than this is past (the processes that met it stopped meeting it).
PROBLEM_FRESH_SECONDS = 600


def check_configuration() -> Check:
    """Misconfigurations processes met at run time (``jobs.database.pooler_hint``: a transaction
    pooler without DATABASE_POOLER=transaction), this process's own included, and live beats and
    nodes that disagree on the broker (``jobs.broker.broker_identity``). Each one fails the probe:
    the cluster runs a fraction of its slots, or none."""
    fresh = ConfigurationProblem.objects.annotate(age=age_of("last_seen")).filter(
        age__lt=timedelta(seconds=PROBLEM_FRESH_SECONDS)
    )
    problems: list[dict[str, Any]] = [
        {
            "cause": row.cause,
            "message": row.message,
            "process": row.process,
            "last_seen": row.last_seen,
        }
        for row in fresh
    ]
    own = pooler_hint.detected()
    if own is not None and not any(p["cause"] == pooler_hint.CAUSE for p in problems):
        problems.append(
            {"cause": pooler_hint.CAUSE, "message": f"{pooler_hint.HINT} (first seen: {own})"}
        )
    stale = get_ops_conf().beat_stale_after
    brokers: dict[str, list[str]] = {}
    for name, broker in (
        BeatHeartbeat.objects.annotate(age=age_of("last_seen"))
        .filter(age__lt=timedelta(seconds=stale))
        .exclude(broker="")
        .values_list("name", "broker")
    ):
        brokers.setdefault(broker, []).append(f"beat {name}")
    for name, broker in (
        with_liveness(Node.objects.exclude(broker=""))
        .filter(liveness=Liveness.ALIVE)
        .values_list("name", "broker")
    ):
        brokers.setdefault(broker, []).append(f"node {name}")
    if len(brokers) > 1:
        problems.append(
            {
                "cause": "brokers_differ",
                "message": "live beats and workers use different brokers: set the same "
                "CELERY_BROKER_URL on every beat and worker",
                "brokers": {broker: names[:LISTED] for broker, names in sorted(brokers.items())},
            }
        )
    return {"ok": not problems, "problems": problems}


_READ_FROM_DATABASE = ("beats", "nodes", "schedules", "queues", "configuration")


def _report(checks: dict[str, Callable[[], Check]]) -> JsonResponse:
    results: dict[str, Check] = {}
    for name, probe in checks.items():
        if name in _READ_FROM_DATABASE and not results["database"]["ok"]:
            results[name] = {"ok": False, "error": "the database is unreachable"}
            continue
        results[name] = _timed(probe)
    ok = all(result["ok"] for result in results.values())
    body = {"status": "ok" if ok else "failing", "checks": results}
    response = JsonResponse(body, status=200 if ok else 503)
    response["Cache-Control"] = "no-store"
    return response


def _details_for_insiders(
    probe: Callable[[HttpRequest], JsonResponse],
) -> Callable[[HttpRequest], JsonResponse]:
    """Answers ``probe``'s status to everyone, its details only to those who may see them."""

    @wraps(probe)
    def answer(request: HttpRequest) -> JsonResponse:
        response = probe(request)
        try:
            if access.sees_internals(request):
                return response
        except DatabaseError:
            connection.close()  # credentials cannot be checked now: the status is still due
        status = json.loads(response.content)["status"]
        status_only = JsonResponse({"status": status}, status=response.status_code)
        status_only["Cache-Control"] = "no-store"
        return status_only

    return answer


def livez(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@_details_for_insiders
def readyz(request: HttpRequest) -> JsonResponse:
    return _report({"database": check_database, "broker": check_broker})


@_details_for_insiders
def healthz(request: HttpRequest) -> JsonResponse:
    return _report(
        {
            "database": check_database,
            "broker": check_broker,
            "beats": check_beats,
            "nodes": check_nodes,
            "schedules": check_schedules,
            "queues": check_queues,
            "configuration": check_configuration,
        }
    )
