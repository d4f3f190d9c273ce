"""Catching a run's lines in its worker process, for the run's duration.

A Celery prefork pool process runs one task at a time, so while a run executes, everything its
process logs and prints is the run's: a handler on the root logger takes each record at the
job's level (``@job(log_level=...)``, else ``JOBS_RUN_LOG_LEVEL``), and ``sys.stdout`` /
``sys.stderr`` are wrapped so each printed line is taken too, then passed on to what they were.
When Celery redirects the streams into its ``celery.redirected`` logger
(``worker_redirect_stdouts``, its default) a printed line reaches the handler a second time as
that logger's record, which is left out. Records of another run (bound by
``jobs.process.logcontext``, e.g. a threads pool's other task) and of the writer thread itself
are left out too.

A level below the root logger's lowers it for the run, setting the root's other handlers to the
level they had in effect, so the process's own output is the same as without the run log.
"""

from __future__ import annotations

import io
import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from jobs.conf import RunLogConf, get_run_log_conf
from jobs.process import logcontext
from jobs.runlog.lines import Lines
from jobs.runlog.writer import WRITER, Writer

# Celery's LoggingProxy logs what the worker's streams get under this name.
REDIRECTED_LOGGER = "celery.redirected"
_formatter = logging.Formatter()


class RunLogHandler(logging.Handler):
    """Takes the records of run ``run_id`` into its ``lines``."""

    def __init__(self, run_id: int, lines: Lines, level: int, writer: Writer) -> None:
        super().__init__(level)
        self.run_id, self.lines, self.writer = run_id, lines, writer

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == REDIRECTED_LOGGER or threading.get_ident() == self.writer.ident:
            return False
        bound = logcontext.current().get("run_id")
        return bound is None or bound == self.run_id

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info:
                message = f"{message}\n{_formatter.formatException(record.exc_info)}"
            if record.stack_info:
                message = f"{message}\n{_formatter.formatStack(record.stack_info)}"
            if self.lines.add(record.levelname, message, record.created):
                self.writer.wake()
        except Exception:
            self.handleError(record)


class RunStream(io.TextIOBase):
    """A stream that takes each complete line written to it as a run's line at ``level``
    (``STDOUT``, ``STDERR``), then passes everything on to ``passed_to``."""

    def __init__(self, passed_to: TextIO, level: str, lines: Lines, writer: Writer) -> None:
        super().__init__()
        self.passed_to, self.level, self.lines, self.writer = passed_to, level, lines, writer
        self._partial = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            pieces = (self._partial + text).split("\n")
            self._partial = pieces.pop()
        now = time.time()
        for piece in pieces:
            if self.lines.add(self.level, piece, now):
                self.writer.wake()
        return self.passed_to.write(text)

    def flush(self) -> None:
        self.passed_to.flush()

    def end(self) -> None:
        """Take what was written after the last line break."""
        with self._lock:
            partial, self._partial = self._partial, ""
        if partial:
            self.lines.add(self.level, partial, time.time())

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return bool(self.passed_to.isatty())

    def fileno(self) -> int:
        return self.passed_to.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.passed_to, "encoding", None) or "utf-8")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.passed_to, name)


@contextmanager
def capturing(
    run_id: int,
    level: int | None = None,
    *,
    conf: RunLogConf | None = None,
    writer: Writer = WRITER,
) -> Iterator[Lines | None]:
    """Keep what the block logs (at ``level``, else the configured one) and prints as run
    ``run_id``'s lines; returns once they are written. ``None`` when run logs are off."""
    conf = conf or get_run_log_conf()
    if not conf.enabled:
        yield None
        return
    lines = Lines(head=conf.head_lines, tail=conf.tail_lines, max_chars=conf.max_line_chars)
    writer.open(run_id, lines, conf.flush_seconds)
    handler = RunLogHandler(run_id, lines, conf.level if level is None else level, writer)
    root = logging.getLogger()
    restore_levels = _lowered(root, handler.level)
    root.addHandler(handler)
    out, err = sys.stdout, sys.stderr
    streams = [
        RunStream(out, "STDOUT", lines, writer) if out is not None else None,
        RunStream(err, "STDERR", lines, writer) if err is not None else None,
    ]
    sys.stdout = streams[0] or out
    sys.stderr = streams[1] or err
    try:
        yield lines
    finally:
        if sys.stdout is streams[0]:
            sys.stdout = out
        if sys.stderr is streams[1]:
            sys.stderr = err
        for stream in streams:
            if stream is not None:
                stream.end()
        root.removeHandler(handler)
        restore_levels()
        writer.close(run_id)


def _lowered(root: logging.Logger, level: int) -> Any:
    """Lower ``root`` to ``level`` if it is above, its other handlers kept at the level that was
    in effect; returns what puts everything back."""
    before = root.level
    if before == logging.NOTSET or level >= before:
        return lambda: None
    raised = [handler for handler in root.handlers if handler.level == logging.NOTSET]
    for handler in raised:
        handler.setLevel(before)
    root.setLevel(level)

    def restore() -> None:
        root.setLevel(before)
        for handler in raised:
            handler.setLevel(logging.NOTSET)

    return restore
