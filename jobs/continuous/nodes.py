"""Worker nodes: each ``celery worker`` registers its row and heartbeats from its main process.

A node is *alive* while its last heartbeat is younger than 3 of its own heartbeat intervals by
the database clock, *dead* once it missed 3, and *stopped* as soon as it shut down cleanly. Dead
is derived, never stored: nothing has to run for a node to become dead, and a node that only
stalled (SIGSTOP, a long pause) is alive again at its next heartbeat.

The SQL that decides liveness is here, once: ``LIVE_NODE_PG`` for statements and
``with_liveness`` for querysets (the admin, ``jobs nodes``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypedDict

from django.db import DatabaseError, connection, models
from django.db.models import Case, Count, ExpressionWrapper, F, Func, Q, QuerySet, Value, When
from django.db.models.functions import Now

from jobs.broker import broker_identity
from jobs.models import Job, Node, NodeState

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

log = logging.getLogger(__name__)

# A node that misses this many heartbeats in a row is dead.
MISSED_HEARTBEATS = 3


class Liveness(models.TextChoices):
    ALIVE = "alive"
    DEAD = "dead"
    STOPPED = "stopped"


# A statement fragment over ``jobs_node AS n``: the node is alive by the database clock.
LIVE_NODE_PG = (
    "n.state = 'alive' AND n.last_heartbeat "
    f"+ make_interval(secs => {MISSED_HEARTBEATS} * n.heartbeat_interval) > now()"
)


@dataclass(frozen=True)
class NodeInfo:
    """What a worker says about itself when it registers."""

    name: str
    host: str
    pid: int
    queues: Sequence[str]
    concurrency: int
    version: str
    heartbeat_interval: float


_REGISTER = """
INSERT INTO jobs_node (name, host, pid, queues, concurrency, version, state, started_at,
                       last_heartbeat, stopped_at, heartbeat_interval, broker)
VALUES (%(name)s, %(host)s, %(pid)s, %(queues)s::jsonb, %(concurrency)s, %(version)s, 'alive',
        now(), now(), NULL, %(interval)s, %(broker)s)
ON CONFLICT (name) DO UPDATE
   SET host = EXCLUDED.host, pid = EXCLUDED.pid, queues = EXCLUDED.queues,
       concurrency = EXCLUDED.concurrency, version = EXCLUDED.version, state = 'alive',
       started_at = EXCLUDED.started_at, last_heartbeat = EXCLUDED.last_heartbeat,
       stopped_at = NULL, heartbeat_interval = EXCLUDED.heartbeat_interval,
       broker = EXCLUDED.broker
"""

# Conditional on the pid: a restarted worker with the same name owns the row from then on.
_HEARTBEAT = """
UPDATE jobs_node SET last_heartbeat = now(), queues = %(queues)s::jsonb
 WHERE name = %(name)s AND pid = %(pid)s AND state = 'alive'
"""

_MARK_STOPPED = """
UPDATE jobs_node SET state = 'stopped', stopped_at = now()
 WHERE name = %(name)s AND pid = %(pid)s AND state = 'alive'
"""


def register(info: NodeInfo) -> None:
    """Create or take over the node's row, alive from now (database clock)."""
    with connection.cursor() as cursor:
        cursor.execute(
            _REGISTER,
            {
                "name": info.name,
                "host": info.host,
                "pid": info.pid,
                "queues": json.dumps(sorted(info.queues)),
                "concurrency": info.concurrency,
                "version": info.version[:64],
                "interval": info.heartbeat_interval,
                "broker": broker_identity.current(),
            },
        )


def heartbeat(name: str, pid: int, queues: Sequence[str]) -> bool:
    """Record that the node is alive; ``False`` when its row is gone or belongs to another pid
    (then register again)."""
    with connection.cursor() as cursor:
        cursor.execute(_HEARTBEAT, {"name": name, "pid": pid, "queues": json.dumps(sorted(queues))})
        return cursor.rowcount == 1


def mark_stopped(name: str, pid: int) -> bool:
    """A clean shutdown: the node is stopped at once, not dead 3 heartbeats later."""
    with connection.cursor() as cursor:
        cursor.execute(_MARK_STOPPED, {"name": name, "pid": pid})
        return cursor.rowcount == 1


class _Seconds(Func):
    """``make_interval(secs => …)``: a number of seconds as an interval (PostgreSQL)."""

    template = "make_interval(secs => %(expressions)s)"
    output_field = models.DurationField()


class LivenessAnnotations(TypedDict):
    liveness: str
    dead_at: datetime


def with_liveness(
    nodes: QuerySet[Node],
) -> QuerySet[WithAnnotations[Node, LivenessAnnotations]]:
    """Annotate ``liveness`` (alive, dead or stopped, by the database clock) and ``dead_at``."""
    dead_at = ExpressionWrapper(
        F("last_heartbeat") + _Seconds(F("heartbeat_interval") * MISSED_HEARTBEATS),
        output_field=models.DateTimeField(),
    )
    return nodes.annotate(dead_at=dead_at).annotate(
        liveness=Case(
            When(state=NodeState.STOPPED, then=Value(Liveness.STOPPED.value)),
            When(Q(dead_at__gt=Now()), then=Value(Liveness.ALIVE.value)),
            default=Value(Liveness.DEAD.value),
            output_field=models.CharField(),
        )
    )


def unconsumed_queues() -> list[tuple[str, int]]:
    """Each queue of enabled jobs that no live node consumes, with how many jobs publish to it,
    by name; none while no node is live (nothing is consumed then, and the nodes'
    own check says so). Known from the queues each node records at its heartbeat."""
    live = with_liveness(Node.objects.all()).filter(liveness=Liveness.ALIVE)
    consumed = {
        queue
        for queues in live.values_list("queues", flat=True)
        if isinstance(queues, list)  # a row written around the worker's heartbeat
        for queue in queues
        if isinstance(queue, str)
    }
    if not consumed:
        return []
    waiting = (
        Job.objects.filter(enabled=True)
        .exclude(queue__in=consumed)
        .values_list("queue")
        .annotate(jobs=Count("pk"))
        .order_by("queue")
    )
    return [(queue, jobs) for queue, jobs in waiting]


def state_of(node: Node, now: datetime) -> Liveness:
    """The node's liveness at ``now``, which should come from the database clock."""
    if node.state == NodeState.STOPPED:
        return Liveness.STOPPED
    dead_at = node.last_heartbeat + timedelta(seconds=MISSED_HEARTBEATS * node.heartbeat_interval)
    return Liveness.ALIVE if now < dead_at else Liveness.DEAD


class NodeHeartbeat:
    """Registers the node, then heartbeats every ``info.heartbeat_interval`` seconds on its own
    thread (and database connection) until ``stop``, which marks the node stopped.

    ``queues`` is asked at every beat, so queues added to or cancelled on a running worker are
    what placement sees.
    """

    def __init__(self, info: NodeInfo, queues: Callable[[], Sequence[str]] | None = None) -> None:
        self.info = info
        self._queues = queues or (lambda: info.queues)
        self._done = threading.Event()
        self.registered = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"node-heartbeat:{info.name}", daemon=True
        )

    def queues(self) -> list[str]:
        try:
            return sorted(self._queues())
        except RuntimeError:  # the worker changed its queues while we read them
            return sorted(self.info.queues)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop heartbeating and mark the node stopped (in the calling thread)."""
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()
        try:
            mark_stopped(self.info.name, self.info.pid)
            log.info(
                "node %s stopped",
                self.info.name,
                extra={"action": "node_stopped", "node": self.info.name},
            )
        except DatabaseError as exc:
            log.warning(
                "could not mark node %s stopped: %s; it will count as dead after %d heartbeats",
                self.info.name,
                exc,
                MISSED_HEARTBEATS,
                extra={"action": "node_stop_error", "node": self.info.name},
            )
        finally:
            connection.close()

    def beat_once(self) -> None:
        """One heartbeat; registers the node first, or again if its row was taken or removed."""
        if self.registered.is_set() and heartbeat(self.info.name, self.info.pid, self.queues()):
            return
        if self.registered.is_set():
            log.warning(
                "node %s: its row was removed, stopped or taken by another process; "
                "registering again",
                self.info.name,
                extra={"action": "node_reregistered", "node": self.info.name},
            )
        register(replace(self.info, queues=self.queues()))
        if not self.registered.is_set():
            log.info(
                "node %s registered (heartbeat every %ss)",
                self.info.name,
                self.info.heartbeat_interval,
                extra={"action": "node_registered", "node": self.info.name},
            )
        self.registered.set()

    def _run(self) -> None:
        # Fixed rate, not fixed delay: a slow beat does not push every later one back.
        next_at = time.monotonic()
        try:
            while True:
                try:
                    self.beat_once()
                except Exception as exc:
                    # A database blip must not end the heartbeat; the next beat reconnects.
                    log.warning(
                        "node heartbeat failed: %s",
                        exc,
                        extra={"action": "node_heartbeat_error", "node": self.info.name},
                    )
                    connection.close()
                next_at = max(next_at + self.info.heartbeat_interval, time.monotonic())
                if self._done.wait(next_at - time.monotonic()):
                    return
        finally:
            connection.close()
