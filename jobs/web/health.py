"""Health: the probes (``/livez``, ``/readyz``, ``/healthz``) and the beat heartbeat they read.

- ``/livez``: the web process answers. No I/O, so a slow database never restarts the web.
- ``/readyz``: this web process can serve: the database and the broker answer.
- ``/healthz``: the cluster works: database, broker, at least one live beat and one live node,
  with details as JSON. 200 when all hold, else 503.

``/readyz`` and ``/healthz`` answer everyone their status (``{"status": "ok"}`` or
``"failing"``, and the code); the checks' details only a client ``jobs.web.access`` lets see the
internals.

Beats have no table of their own in Celery, so each records a heartbeat row (``BeatHeartbeat``)
at most every ``JOBS_BEAT_HEARTBEAT_INTERVAL`` from its tick (``timed_beat_tick``), with the tick
count and time spent ticking for ``/metrics``. Ages are judged by the database clock.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from functools import wraps
from typing import Any, TypeVar

from celery import current_app
from django.db import DatabaseError, connection
from django.db.models import DurationField, ExpressionWrapper, F
from django.db.models.functions import Now
from django.http import HttpRequest, JsonResponse
from django.utils import timezone

from jobs.conf import get_ops_conf
from jobs.continuous.nodes import Liveness, with_liveness
from jobs.models import BeatHeartbeat, Node, ScheduleError
from jobs.web import access

log = logging.getLogger(__name__)

BROKER_TIMEOUT_SECONDS = 2
# A probe's details list at most this many beats and nodes (the counts are always exact).
LISTED = 20

T = TypeVar("T")


# --- the beat heartbeat ------------------------------------------------------------------------

_UPSERT_HEARTBEAT = """
INSERT INTO jobs_beatheartbeat
       (name, host, pid, started_at, last_seen, ticks, tick_seconds, max_tick_seconds)
VALUES (%(name)s, %(host)s, %(pid)s, %(started_at)s, now(), %(ticks)s, %(tick_seconds)s, %(max)s)
ON CONFLICT (name) DO UPDATE
   SET last_seen = now(), ticks = EXCLUDED.ticks, tick_seconds = EXCLUDED.tick_seconds,
       max_tick_seconds = EXCLUDED.max_tick_seconds
"""


class BeatHeartbeatRecorder:
    """This beat process's tick totals, written to its ``BeatHeartbeat`` row now and then.

    The row is named ``host:pid`` and owned by this process alone, so it writes absolute
    totals: a lost write loses nothing but freshness.
    """

    def __init__(self, interval: float) -> None:
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.name = f"{self.host}:{self.pid}"
        self.started_at = timezone.now()
        self.interval = interval
        self.ticks = 0
        self.tick_seconds = 0.0
        self.max_tick_seconds = 0.0
        self._last_write: float | None = None

    def tick(self, seconds: float) -> None:
        """Count one tick of ``seconds``; write the row when the last write is old enough."""
        self.ticks += 1
        self.tick_seconds += seconds
        self.max_tick_seconds = max(self.max_tick_seconds, seconds)
        now = time.monotonic()
        if self._last_write is not None and now - self._last_write < self.interval:
            return
        self._last_write = now  # also after a failure: retry in one interval, not every tick
        try:
            self.write()
        except DatabaseError as exc:
            # Beat's own tick already reports database trouble; this only must not stop it.
            log.warning(
                "beat heartbeat not recorded: %s",
                exc,
                extra={"action": "beat_heartbeat_error", "beat": self.name},
            )
            connection.close()

    def write(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                _UPSERT_HEARTBEAT,
                {
                    "name": self.name,
                    "host": self.host,
                    "pid": self.pid,
                    "started_at": self.started_at,
                    "ticks": self.ticks,
                    "tick_seconds": self.tick_seconds,
                    "max": self.max_tick_seconds,
                },
            )


_recorder: BeatHeartbeatRecorder | None = None
_recorder_lock = threading.Lock()


def beat_recorder() -> BeatHeartbeatRecorder:
    """This process's recorder (a new one after a fork: the row is per process)."""
    global _recorder
    with _recorder_lock:
        if _recorder is None or _recorder.pid != os.getpid():
            _recorder = BeatHeartbeatRecorder(get_ops_conf().beat_heartbeat_interval)
        return _recorder


def timed_beat_tick(tick: Callable[..., T]) -> Callable[..., T]:
    """Decorates ``ClusterScheduler.tick``: times each tick and records the beat's heartbeat."""

    @wraps(tick)
    def timed(*args: Any, **kwargs: Any) -> T:
        started = time.perf_counter()
        try:
            return tick(*args, **kwargs)
        finally:
            beat_recorder().tick(time.perf_counter() - started)

    return timed


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


def _age(field: str) -> ExpressionWrapper:
    return ExpressionWrapper(Now() - F(field), output_field=DurationField())


def _seconds(age: timedelta) -> float:
    return round(age.total_seconds(), 3)


def check_beats() -> Check:
    stale = get_ops_conf().beat_stale_after
    beats = (
        BeatHeartbeat.objects.annotate(age=_age("last_seen"))
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
        .annotate(age=_age("last_heartbeat"))
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
    return {"ok": True, "broken": count, "jobs": listed}


def _report(checks: dict[str, Callable[[], Check]]) -> JsonResponse:
    results: dict[str, Check] = {}
    for name, probe in checks.items():
        if name in ("beats", "nodes", "schedules") and not results["database"]["ok"]:
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
        }
    )
