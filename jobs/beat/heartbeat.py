"""A beat's heartbeat: Celery keeps no table of beats, so each beat process records a row
(``BeatHeartbeat``) at most every ``JOBS_BEAT_HEARTBEAT_INTERVAL`` from its tick
(``timed_beat_tick``), with the tick count and the time spent ticking. ``/healthz`` and
``/metrics`` read the rows; ages are judged by the database clock."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from django.db import DatabaseError, connection
from django.utils import timezone

from jobs.broker import broker_identity
from jobs.conf import get_ops_conf

log = logging.getLogger(__name__)

T = TypeVar("T")


_UPSERT_HEARTBEAT = """
INSERT INTO jobs_beatheartbeat
       (name, host, pid, started_at, last_seen, ticks, tick_seconds, max_tick_seconds,
        configuration, broker)
VALUES (%(name)s, %(host)s, %(pid)s, %(started_at)s, now(), %(ticks)s, %(tick_seconds)s, %(max)s,
        %(configuration)s, %(broker)s)
ON CONFLICT (name) DO UPDATE
   SET last_seen = now(), ticks = EXCLUDED.ticks, tick_seconds = EXCLUDED.tick_seconds,
       max_tick_seconds = EXCLUDED.max_tick_seconds, configuration = EXCLUDED.configuration,
       broker = EXCLUDED.broker
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
        # The Celery configuration this beat holds (jobs.beat.configured): a rolling deploy's
        # beats of two releases are told apart by it.
        self.configuration = ""
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
                    "configuration": self.configuration,
                    "broker": broker_identity.current(),
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
