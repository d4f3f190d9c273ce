"""The heartbeat that keeps a run's lease alive, and notices when it cannot."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

from jobs.guard import lease
from jobs.guard.lease import HeldLease
from jobs.guard.reconnect import CONNECTION_ERRORS

log = logging.getLogger(__name__)

# After a renewal failed on a database error, try again this soon (the local deadline still
# bounds how long the run may go on without a successful renewal).
RETRY_AFTER_ERROR_SECONDS = 1.0
# How long the heartbeat thread sleeps when it keeps no lease.
IDLE_SECONDS = 60.0


class LeaseKeeper:
    """Renews ``held`` every ttl/3 while the run's function runs.

    ``stopping`` (the run's ``ctx.stopping``) is set when:

    - the lease is *lost*: the database refused a renewal (the token no longer holds) or the
      local deadline passed without a successful renewal (the database is unreachable, or the
      process was paused); the outcome will then be fenced;
    - another run asked this holder to stop (overlap ``replace``), seen at a renewal;
    - the job's soft time limit passed.

    The renewals happen on the process's heartbeat thread, shared by every keeper of the
    process: starting a thread per run would cost more than a short run itself. The thread has a
    database connection of its own, opened at the first renewal and kept while any keeper is
    started, so that a renewal never competes for a new connection with whoever else connects
    (a server with every slot taken still renews on it); it is closed once no keeper is left
    (docs/connections.md). After ``stop()`` returns no renewal of this keeper is in flight or
    to come.
    """

    def __init__(
        self,
        held: HeldLease,
        stopping: threading.Event,
        *,
        soft_time_limit: float | None = None,
    ) -> None:
        self._current = held
        self._stopping = stopping
        self._lock = threading.Lock()  # held by the heartbeat thread while it acts for us
        self._stopped = False
        self._lost = threading.Event()
        self._lost_reason = ""
        self._soft_limit = soft_time_limit
        # Pending while set; cleared when reached.
        self._soft_deadline = (
            None if soft_time_limit is None else time.monotonic() + soft_time_limit
        )
        self._soft_limit_reached = threading.Event()
        self._next_renewal = time.monotonic() + held.ttl / 3

    @property
    def current(self) -> HeldLease:
        return self._current

    @property
    def lost(self) -> bool:
        return self._lost.is_set() or not self._current.locally_valid

    @property
    def lost_reason(self) -> str:
        if self._lost_reason:
            return self._lost_reason
        return "" if self._current.locally_valid else "the local deadline passed"

    @property
    def stop_requested_by(self) -> str:
        """Who asked this run to stop (overlap ``replace``), or ``""``."""
        return self._current.stop_requested_by

    @property
    def soft_limit_reached(self) -> bool:
        return self._soft_limit_reached.is_set()

    def start(self) -> None:
        _HEARTBEAT.add(self)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
        _HEARTBEAT.remove(self)

    # --- on the heartbeat thread ------------------------------------------------------------

    def _wake_at(self) -> float:
        if self._stopped or self._lost.is_set():
            return float("inf")
        wake = min(self._next_renewal, self._current.local_deadline)
        return wake if self._soft_deadline is None else min(wake, self._soft_deadline)

    def _tick(self, using: str) -> None:
        with self._lock:
            if self._stopped or self._lost.is_set():
                return
            now = time.monotonic()
            if self._soft_deadline is not None and now >= self._soft_deadline:
                self._reach_soft_limit()
            if now >= self._current.local_deadline:
                self._declare_lost("no successful renewal before the local deadline")
            elif now >= self._next_renewal:
                renewed = self._renew_once(using)
                wait = self._current.ttl / 3 if renewed else RETRY_AFTER_ERROR_SECONDS
                self._next_renewal = time.monotonic() + wait

    def _renew_once(self, using: str) -> bool:
        """One renewal; ``False`` when the database could not be asked."""
        try:
            renewed = _renew_on_kept_connection(self._current, using)
        except DatabaseError as exc:
            # Keep trying until the local deadline: a blip must not stop a healthy run.
            log.warning(
                "lease renewal failed, retrying",
                extra={"action": "lease_renew_error", "key": self._current.key, "error": str(exc)},
            )
            _close(using)
            return False
        if renewed is None:
            self._declare_lost("the database refused the renewal (lapsed or taken over)")
            return True
        if renewed.stop_requested_by and not self._current.stop_requested_by:
            log.info(
                "asked to stop by %s",
                renewed.stop_requested_by,
                extra={"action": "stop_requested", "key": renewed.key, "token": renewed.token},
            )
            self._stopping.set()
        self._current = renewed
        return True

    def _reach_soft_limit(self) -> None:
        log.warning(
            "soft time limit of %s s reached: asking the job to stop",
            self._soft_limit,
            extra={"action": "soft_time_limit", "key": self._current.key},
        )
        self._soft_deadline = None
        self._soft_limit_reached.set()
        self._stopping.set()

    def _declare_lost(self, reason: str) -> None:
        log.error(
            "lease lost: %s",
            reason,
            extra={"action": "lease_lost", "key": self._current.key, "token": self._current.token},
        )
        self._lost_reason = reason
        self._lost.set()
        self._stopping.set()


def _renew_on_kept_connection(held: HeldLease, using: str) -> HeldLease | None:
    """``lease.renew`` on the heartbeat thread's kept connection. If that connection broke since
    the last round (a database restart or failover, a pooler or the network dropping it), once
    more on a new one at once: what Django's ``CONN_HEALTH_CHECKS`` does for a request's
    persistent connection, without the health check's round trip while the connection is sound.
    A new connection that fails is the database's answer: the keeper retries it later."""
    if connections[using].connection is None:
        return lease.renew(held, using=using)
    try:
        return lease.renew(held, using=using)
    except CONNECTION_ERRORS as exc:
        log.info(
            "the lease heartbeat's connection broke (%s); renewing on a new one",
            _first_line(exc),
            extra={"action": "lease_heartbeat_reconnect", "key": held.key},
        )
        _close(using)
    return lease.renew(held, using=using)


def _close(using: str) -> None:
    with contextlib.suppress(DatabaseError):  # a broken connection may fail to close cleanly
        connections[using].close()


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class _Heartbeat:
    """The one thread per process that acts for every started keeper when it is due.

    Started on first use in each process (a forked pool process starts its own, with none of its
    parent's keepers: ``forget_after_fork``). Its connection (to the database ``using``) is kept
    from one round of renewals to the next while any keeper is started, and closed when the last
    one stops: a process without a run in progress holds no connection for its heartbeat (nor
    keeps a test database from being dropped).
    """

    def __init__(self, using: str = DEFAULT_DB_ALIAS) -> None:
        self.using = using
        self._start_afresh()

    def _start_afresh(self) -> None:
        self._lock = threading.Lock()
        self._keepers: set[LeaseKeeper] = set()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._planned = 0.0  # when the thread means to wake next (monotonic)
        self._connected = False  # whether the thread holds its connection

    def add(self, keeper: LeaseKeeper) -> None:
        with self._lock:
            self._keepers.add(keeper)
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                self._planned = 0.0
                self._connected = False
                self._thread = threading.Thread(
                    target=self._run, name="lease-heartbeat", daemon=True
                )
                self._thread.start()
            # Short runs come and go within one renewal period: no need to wake the thread
            # for each, only for one due before the thread's next planned look.
            wake = keeper._wake_at() < self._planned
        if wake:
            self._wake.set()

    def remove(self, keeper: LeaseKeeper) -> None:
        with self._lock:
            self._keepers.discard(keeper)
            # The last keeper gone: the thread closes its connection now, not at its next look.
            wake = not self._keepers and self._connected
        if wake:
            self._wake.set()

    def _run(self) -> None:
        try:
            while True:
                self._wake.clear()
                with self._lock:
                    keepers = list(self._keepers)
                now = time.monotonic()
                for keeper in [keeper for keeper in keepers if keeper._wake_at() <= now]:
                    self._tick(keeper)
                with self._lock:
                    idle = not self._keepers
                if idle:
                    _close(self.using)  # outside the lock: a keeper's start need not wait for it
                with self._lock:
                    self._connected = connections[self.using].connection is not None
                    wake_at = min((k._wake_at() for k in self._keepers), default=float("inf"))
                    self._planned = min(wake_at, time.monotonic() + IDLE_SECONDS)
                    if self._connected and not self._keepers:
                        self._planned = 0.0  # the last one stopped meanwhile: close at once
                self._wake.wait(max(0.0, self._planned - time.monotonic()))
        finally:
            _close(self.using)

    def _tick(self, keeper: LeaseKeeper) -> None:
        try:
            keeper._tick(self.using)
        except Exception:  # one keeper's failure must not stop the others' renewals
            log.exception("lease keeper failed", extra={"action": "lease_keeper_error"})
            keeper._declare_lost("the lease keeper failed (see the log)")

    def forget_after_fork(self) -> None:
        """In a forked child (a Celery pool process): drop the keepers copied from the parent.
        They are the parent's to renew and to stop; a child that kept them would renew a lease
        whose holder had stopped it, or was paused or dead (found by the nemesis: a continuous
        job's lease renewed for minutes by a pool process while no tenure ran, so no node
        could take the job over). Its own keepers start their own thread here."""
        self._start_afresh()


_HEARTBEAT = _Heartbeat()
os.register_at_fork(after_in_child=_HEARTBEAT.forget_after_fork)
