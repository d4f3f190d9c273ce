"""The heartbeat that keeps a run's lease alive, and notices when it cannot."""

from __future__ import annotations

import logging
import threading
import time

from django.db import DatabaseError, connection

from jobs import lease
from jobs.lease import HeldLease

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Renews ``held`` every ttl/3 on its own thread (and its own database connection).

    The lease is *lost* when the database refuses a renewal (the token no longer holds) or when
    the local deadline passes without a successful renewal (the database is unreachable); either
    way ``stopping`` is set so the job function can return, and the outcome will be fenced.
    """

    def __init__(self, held: HeldLease, stopping: threading.Event) -> None:
        self._current = held
        self._stopping = stopping
        self._done = threading.Event()
        self._lost = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"lease-keeper:{held.key}", daemon=True
        )

    @property
    def current(self) -> HeldLease:
        return self._current

    @property
    def lost(self) -> bool:
        return self._lost.is_set() or not self._current.locally_valid

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            while not self._done.is_set():
                until_deadline = self._current.local_deadline - time.monotonic()
                if until_deadline <= 0:
                    self._declare_lost("no successful renewal before the local deadline")
                    return
                if self._done.wait(min(self._current.ttl / 3, until_deadline)):
                    return
                self._renew_once()
                if self._lost.is_set():
                    return
        finally:
            connection.close()

    def _renew_once(self) -> None:
        try:
            renewed = lease.renew(self._current)
        except DatabaseError as exc:
            # Keep trying until the local deadline: a blip must not stop a healthy run.
            log.warning(
                "lease renewal failed, retrying",
                extra={"action": "lease_renew_error", "key": self._current.key, "error": str(exc)},
            )
            connection.close()
            return
        if renewed is None:
            self._declare_lost("the database refused the renewal (lapsed or taken over)")
        else:
            self._current = renewed

    def _declare_lost(self, reason: str) -> None:
        log.error(
            "lease lost: %s",
            reason,
            extra={"action": "lease_lost", "key": self._current.key, "token": self._current.token},
        )
        self._lost.set()
        self._stopping.set()
