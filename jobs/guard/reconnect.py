"""A run's claim or finish whose connection broke: learn what the database recorded, then go on.

A statement can commit and still fail on the worker: the connection broke (a database restart or
failover, a pooler or a network cut) between the commit and its reply. For the claim that used to
mean a run recorded ``running`` that nobody runs, recorded lost only once its lease lapsed; for the
finish, an outcome never recorded, or recorded but reported to Celery as an error. Instead the
runner reconnects and asks again for a while: the claim reads back the claim it made (its node,
pid and task id on the run) or claims afresh; the finish records again, or reads back the outcome
it recorded (``jobs.guard.runner``). Neither can run a slot twice: the claim still moves a run
out of ``scheduled`` once, and the finish stays fenced by the token.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from django.db import DatabaseError, InterfaceError, OperationalError, connection

from jobs.guard import lease
from jobs.guard.lease import HeldLease

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long a worker keeps trying to reach the database before it gives the run up as it stands
# (still scheduled: maintenance re-publishes it; running: recorded lost when its lease lapses).
RECONNECT_WINDOW_SECONDS = 30.0
FIRST_PAUSE_SECONDS = 0.1
LONGEST_PAUSE_SECONDS = 2.0

# The errors after which a statement may or may not have committed. A DataError or an
# IntegrityError is an answer: the statement failed, and asking again would fail again.
CONNECTION_ERRORS = (OperationalError, InterfaceError)

_delivering: set[int] = set()
_delivering_lock = threading.Lock()


def surviving_disconnect(
    first: Callable[[], T], again: Callable[[], T], *, what: str, run_id: int
) -> T:
    """``first()``; if the connection breaks under it, ``again()`` on a new connection until it
    answers or ``RECONNECT_WINDOW_SECONDS`` pass (then its error is raised). ``again`` must learn
    what ``first`` committed, if anything, before doing it again."""
    try:
        return first()
    except CONNECTION_ERRORS as exc:
        if connection.in_atomic_block:  # an eager call in a caller's transaction: its to handle
            raise
        error: Exception = exc
    deadline = time.monotonic() + RECONNECT_WINDOW_SECONDS
    pause = FIRST_PAUSE_SECONDS
    while True:
        log.warning(
            "the database connection broke during the run's %s (%s); reconnecting to learn "
            "what was recorded",
            what,
            _first_line(error),
            extra={"action": "reconnecting", "run_id": run_id, "statement": what},
        )
        _close_broken_connection()
        time.sleep(pause)
        try:
            return again()
        except CONNECTION_ERRORS as exc:
            if time.monotonic() + pause > deadline:
                raise
            error = exc
            pause = min(pause * 2, LONGEST_PAUSE_SECONDS)


def refreshed(held: HeldLease) -> HeldLease | None:
    """A lease read back after a reconnect, renewed now: its local deadline counted from the cut
    statement's send, perhaps most of a ttl ago, would stop the run early or leave its keeper
    no time to renew. ``None`` when it lapsed meanwhile: the run is no longer this worker's."""
    return lease.renew(held)


@contextlib.contextmanager
def delivering(run_id: int) -> Iterator[bool]:
    """While a delivery of run ``run_id`` is handled in this process: whether it is the only
    one. Only that delivery may read a cut claim back: a second delivery of the same message
    here (a thread pool) carries the same node, pid and task id, so the database cannot tell
    the two apart."""
    with _delivering_lock:
        alone = run_id not in _delivering
        _delivering.add(run_id)
    try:
        yield alone
    finally:
        if alone:
            with _delivering_lock:
                _delivering.discard(run_id)


def _close_broken_connection() -> None:
    with contextlib.suppress(DatabaseError):
        connection.close()


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
