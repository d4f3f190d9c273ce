"""Writes the lines of the runs in progress in this process, from one background thread on a
database connection of its own: never in the job's transaction, never on its connection.

Every ``JOBS_RUN_LOG_FLUSH_SECONDS`` (sooner when many lines wait, ``lines.WRITE_EARLY_AT``) the
thread writes each open run's new lines in one transaction: the lines, and the deletion of
earlier lines its bounds now cut. A worker killed -9 so leaves its run's lines up to about one
period before its death. When a run ends, ``close`` waits for its last lines to be written,
so a run's log is whole once its outcome is recorded.

The thread starts on first use in each process (a forked pool process starts its own), opens its
connection at its first write, keeps it while any run is open and ``LINGER_SECONDS`` after the
last one ends (runs that follow each other reuse it), then closes it. A write that fails (the
database unreachable, the run deleted) is logged, its lines dropped, and the connection replaced
at the next write: the run's own outcome never depends on its log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from datetime import UTC, datetime

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, transaction

from jobs.runlog.lines import Batch, Lines

log = logging.getLogger(__name__)

# How long the thread keeps its connection after the last open run ended.
LINGER_SECONDS = 2.0
# How long a run's end waits for its last lines to be written.
CLOSE_TIMEOUT_SECONDS = 10.0

_INSERT = """
INSERT INTO jobs_runlogline (run_id, seq, at, level, message)
SELECT %s, seq, at, level, message
  FROM unnest(%s::bigint[], %s::timestamptz[], %s::text[], %s::text[]) AS t(seq, at, level, message)
ON CONFLICT (run_id, seq) DO NOTHING
"""
_CUT = "DELETE FROM jobs_runlogline WHERE run_id = %s AND seq > %s AND seq <= %s"


def write(run_id: int, batch: Batch, using: str = DEFAULT_DB_ALIAS) -> None:
    """Store ``batch`` of run ``run_id`` in one transaction (on the calling thread's connection)."""
    lines = batch.lines
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        if batch.cut_through:
            cursor.execute(_CUT, [run_id, batch.cut_after, batch.cut_through])
        if lines:
            cursor.execute(
                _INSERT,
                [
                    run_id,
                    [line.seq for line in lines],
                    [datetime.fromtimestamp(line.at, UTC) for line in lines],
                    [line.level for line in lines],
                    [line.message for line in lines],
                ],
            )


class _Open:
    """One run's lines and whether its end waits for them."""

    def __init__(self, run_id: int, lines: Lines) -> None:
        self.run_id = run_id
        self.lines = lines
        self.closing = False
        self.closed = threading.Event()


class Writer:
    """The one thread per process that writes every open run's lines."""

    def __init__(self, using: str = DEFAULT_DB_ALIAS) -> None:
        self.using = using
        self.period = 1.0
        self._start_afresh()

    def _start_afresh(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[int, _Open] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._idle_since: float | None = None
        self._stop = False
        # The server process of the thread's connection at its last write (tests read it).
        self.connected_as: int | None = None

    @property
    def ident(self) -> int | None:
        """The writer thread's id (its own log records are not a run's lines)."""
        thread = self._thread
        return None if thread is None else thread.ident

    def open(self, run_id: int, lines: Lines, period: float) -> None:
        """Write ``lines`` of run ``run_id`` every ``period`` seconds until ``close``."""
        with self._lock:
            self.period = period
            self._open[run_id] = _Open(run_id, lines)
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._run, name="run-log-writer", daemon=True
                )
                self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def close(self, run_id: int) -> bool:
        """The run ended: returns once its last lines are written (or dropped), or after
        ``CLOSE_TIMEOUT_SECONDS``; whether they were."""
        with self._lock:
            entry = self._open.get(run_id)
            if entry is None:
                return True
            if not entry.lines.count:  # nothing ever logged: nothing to wait for
                del self._open[run_id]
                return True
            entry.closing = True
        self._wake.set()
        return entry.closed.wait(CLOSE_TIMEOUT_SECONDS)

    def _run(self) -> None:
        try:
            while True:
                self._wake.clear()
                with self._lock:
                    entries = list(self._open.values())
                for entry in entries:
                    self._write(entry)
                if self._stop:
                    return
                if self._idle_long_enough():
                    _close(self.using)
                self._wake.wait(self.period)
        finally:
            _close(self.using)

    def _write(self, entry: _Open) -> None:
        closing = entry.closing  # read before taking: lines added before the end are in
        batch = entry.lines.take()
        if batch:
            try:
                write(entry.run_id, batch, self.using)
                self.connected_as = _backend_pid(self.using)
            except Exception as exc:  # the log is best effort: one failure must not stop it
                log.warning(
                    "could not write %d line(s) of run %s's log: %s",
                    len(batch.lines),
                    entry.run_id,
                    exc,
                    extra={"action": "run_log_not_written", "run_id": entry.run_id},
                )
                _close(self.using)
        if closing:
            with self._lock:
                self._open.pop(entry.run_id, None)
            entry.closed.set()

    def _idle_long_enough(self) -> bool:
        with self._lock:
            if self._open:
                self._idle_since = None
                return False
        now = time.monotonic()
        if self._idle_since is None:
            self._idle_since = now
        return now - self._idle_since >= LINGER_SECONDS

    def shutdown(self) -> None:
        """Write what is open, stop the thread and close its connection now (a test process
        about to drop its database; the thread starts again at the next run)."""
        with self._lock:
            thread, self._stop = self._thread, True
        if thread is not None and thread.is_alive() and self._pid == os.getpid():
            self._wake.set()
            thread.join(CLOSE_TIMEOUT_SECONDS)
        self._start_afresh()

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's runs and thread are not this process's."""
        self._start_afresh()


def _backend_pid(using: str) -> int | None:
    raw = connections[using].connection
    return None if raw is None else int(raw.info.backend_pid)


def _close(using: str) -> None:
    with contextlib.suppress(DatabaseError):  # a broken connection may fail to close cleanly
        connections[using].close()


WRITER = Writer()
os.register_at_fork(after_in_child=WRITER.forget_after_fork)
