"""Writes the lines of the runs in progress in this process on a database connection of the run
log's own: never in the job's transaction, never on its connection.

A background thread writes each open run's new lines every ``JOBS_RUN_LOG_FLUSH_SECONDS``
(sooner when many lines wait, ``lines.WRITE_EARLY_AT``), one statement a run: the lines, and the
deletion of earlier lines its bounds now cut. A worker killed -9 so leaves its run's lines up to
about one period before its death. When a run ends, ``close`` writes its last lines itself, from
the job's thread on the same connection (no hand-off to wait for), so a run's log is whole once
its outcome is recorded. A run's writes are serialized by its own lock, so a batch never lands
after the next one (whose deletions it would undo).

The connection is a Django connection of its own (``connections.create_connection``, shared by
the thread and the runs' ends under a lock): opened at the first write, kept while any run is
open and ``LINGER_SECONDS`` after the last one ended (runs that follow each other reuse it), then
closed. Its commits do not wait for the disk (``SET LOCAL synchronous_commit = off``, with the
statement and the commit in one round trip): a log is not an outcome, so a database crash may
lose its last moment's lines, never a run's record. A write that fails (the database
unreachable, the run deleted) is logged, its lines dropped, and the connection replaced at the
next write: the run's own outcome never depends on its log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from datetime import UTC, datetime

import psycopg
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from jobs.runlog.lines import Batch, Lines

log = logging.getLogger(__name__)

# How long the thread keeps its connection after the last open run ended.
LINGER_SECONDS = 2.0
# How long ``shutdown`` waits for the thread to end.
STOP_TIMEOUT_SECONDS = 10.0

# One statement, so one round trip in autocommit: the lines the bounds now cut go, the new ones
# come (a batch written again is a no-op).
_WRITE = """
WITH cut AS (
    DELETE FROM jobs_runlogline
     WHERE run_id = %(run)s AND seq > %(cut_after)s AND seq <= %(cut_through)s
)
INSERT INTO jobs_runlogline (run_id, seq, at, level, message)
SELECT %(run)s, seq, at, level, message
  FROM unnest(%(seqs)s::bigint[], %(ats)s::timestamptz[], %(levels)s::text[], %(messages)s::text[])
       AS t(seq, at, level, message)
ON CONFLICT (run_id, seq) DO NOTHING
"""


def write(
    run_id: int,
    batch: Batch,
    database: BaseDatabaseWrapper | None = None,
    *,
    unhurried: bool = False,
) -> None:
    """Store ``batch`` of run ``run_id`` in one statement (on ``database``, else the calling
    thread's default connection). ``unhurried``: in a transaction of its own whose commit does
    not wait for the disk, sent in one round trip (``SET LOCAL``, so a transaction pooler's
    server connection carries nothing of it to its next client)."""
    lines = batch.lines
    database = database or connections[DEFAULT_DB_ALIAS]
    database.ensure_connection()
    raw = database.connection
    assert raw is not None
    params = {
        "run": run_id,
        "cut_after": batch.cut_after,
        "cut_through": batch.cut_through,
        "seqs": [line.seq for line in lines],
        "ats": [datetime.fromtimestamp(line.at, UTC) for line in lines],
        "levels": [line.level for line in lines],
        "messages": [line.message for line in lines],
    }
    # psycopg's own cursor, binding on the server: Django's wrapper and client-side cursor would
    # render every array into the query's text.
    if not unhurried:
        with psycopg.Cursor(raw) as cursor:
            cursor.execute(_WRITE, params)
        return
    with raw.pipeline(), psycopg.Cursor(raw) as cursor:
        cursor.execute("BEGIN")
        cursor.execute("SET LOCAL synchronous_commit = off")
        cursor.execute(_WRITE, params)
        cursor.execute("COMMIT")


class _Open:
    """One run's lines, written under its own lock."""

    def __init__(self, run_id: int, lines: Lines) -> None:
        self.run_id = run_id
        self.lines = lines
        self.lock = threading.Lock()


class Writer:
    """The run log's connection, and the one thread per process that writes every open run's
    lines while it goes."""

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
        self._database_lock = threading.Lock()
        self._database: BaseDatabaseWrapper | None = None
        # The server process of the connection at its last write (tests read it).
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
        """The run ended: write its last lines now, in the calling thread; whether every line
        taken was written."""
        with self._lock:
            entry = self._open.pop(run_id, None)
        return True if entry is None else self._write(entry)

    def _run(self) -> None:
        try:
            while not self._stop:
                self._wake.clear()
                with self._lock:
                    entries = list(self._open.values())
                for entry in entries:
                    self._write(entry)
                if self._idle_long_enough():
                    self._disconnect()
                self._wake.wait(self.period)
        finally:
            self._disconnect()

    def _write(self, entry: _Open) -> bool:
        with entry.lock:
            batch = entry.lines.take()
            if not batch:
                return True
            with self._database_lock:
                try:
                    database = self._connected()
                    write(entry.run_id, batch, database, unhurried=True)
                except Exception as exc:  # the log is best effort: a failure must not spread
                    log.warning(
                        "could not write %d line(s) of run %s's log: %s",
                        len(batch.lines),
                        entry.run_id,
                        exc,
                        extra={"action": "run_log_not_written", "run_id": entry.run_id},
                    )
                    self._disconnect_locked()
                    return False
        return True

    def _connected(self) -> BaseDatabaseWrapper:
        """The run log's own connection, opened if need be (under ``_database_lock``)."""
        if self._database is None:
            database = connections.create_connection(self.using)
            database.inc_thread_sharing()  # the thread and the runs' ends, one at a time
            self._database = database
        database = self._database
        if database.connection is None:
            database.ensure_connection()
            raw = database.connection
            assert raw is not None
            self.connected_as = int(raw.info.backend_pid)
        return database

    def _disconnect(self) -> None:
        with self._database_lock:
            self._disconnect_locked()

    def _disconnect_locked(self) -> None:
        if self._database is not None:
            with contextlib.suppress(DatabaseError):  # a broken one may fail to close cleanly
                self._database.close()

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
        """Write what is open, stop the thread and close the connection now (a test process
        about to drop its database; all starts again at the next run)."""
        with self._lock:
            thread, self._stop = self._thread, True
            entries = list(self._open.values())
        if thread is not None and thread.is_alive() and self._pid == os.getpid():
            self._wake.set()
            thread.join(STOP_TIMEOUT_SECONDS)
        for entry in entries:
            self._write(entry)
        self._disconnect()
        self._start_afresh()

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's runs, thread and connection are not this process's
        (the connection's socket is the parent's: kept from the garbage collector, whose close
        would end the parent's session, and never used)."""
        if self._database is not None:
            _INHERITED.append(self._database)
        self._start_afresh()


_INHERITED: list[BaseDatabaseWrapper] = []
WRITER = Writer()
os.register_at_fork(after_in_child=WRITER.forget_after_fork)
