"""A run's lines as the worker holds them before they are written: numbered, redacted, cut to
``JOBS_RUN_LOG_MAX_LINE_CHARS``, and bounded to the first ``head`` and the last ``tail`` of them.

The bound holds in memory as in the table: lines past the head wait in a ring of ``tail`` entries,
so a run that logs a million lines holds at most ``head + tail`` of them between two writes, and
each write says which earlier lines past the head to delete (the ones the ring has let go). A
line's number never changes, so a reader tells how many were cut from the gap between two
numbers (``jobs.runlog.reading``).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass

from jobs.values.redaction import redact_text

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# A pending count that asks the writer to write now rather than at its next period.
WRITE_EARLY_AT = 500


@dataclass(frozen=True)
class Line:
    seq: int
    at: float  # seconds since the epoch, the worker's clock (``LogRecord.created``)
    level: str
    message: str


@dataclass(frozen=True)
class Batch:
    """What one write stores: ``lines`` (in ``seq`` order), and that the lines numbered from
    ``cut_after + 1`` to ``cut_through`` are to go (``cut_through`` 0: none)."""

    lines: tuple[Line, ...]
    cut_after: int = 0
    cut_through: int = 0

    def __bool__(self) -> bool:
        return bool(self.lines) or self.cut_through > 0


def level_number(text: object) -> int:
    """The ``logging`` level named ``text`` (one of ``LEVELS``, any case); ``ValueError``
    otherwise."""
    name = str(text).strip().upper()
    if name not in LEVELS:
        raise ValueError(f"not a log level: use one of {', '.join(LEVELS)}")
    number: int = logging.getLevelName(name)
    return number


def storable(message: str, max_chars: int) -> str:
    """``message`` as a line keeps it: redacted, cut to ``max_chars`` (saying how much went), with
    what PostgreSQL's text cannot hold (NUL, lone surrogates) written as escapes."""
    message = redact_text(message)
    if len(message) > max_chars:
        message = f"{message[:max_chars]} [{len(message) - max_chars} more characters cut]"
    message = message.replace("\x00", "\\x00")
    return message.encode("utf-8", "backslashreplace").decode("utf-8")


class Lines:
    """The lines of one run not yet written. Thread-safe: the job's threads add, the writer
    takes."""

    def __init__(self, *, head: int, tail: int, max_chars: int) -> None:
        self.head, self.tail, self.max_chars = head, tail, max_chars
        self._lock = threading.Lock()
        self._seq = 0
        self._head: list[Line] = []
        self._tail: deque[Line] = deque(maxlen=tail)
        self._cut_after = head  # lines up to here past the head were already asked to go

    @property
    def count(self) -> int:
        """How many lines were added so far (kept or not)."""
        return self._seq

    def add(self, level: str, message: str, at: float) -> bool:
        """Add one line; whether enough wait that the writer should come now."""
        text = storable(message, self.max_chars)
        with self._lock:
            self._seq += 1
            line = Line(self._seq, at, level, text)
            if line.seq <= self.head:
                self._head.append(line)
            else:
                self._tail.append(line)
            return len(self._head) + len(self._tail) >= WRITE_EARLY_AT

    def take(self) -> Batch:
        """The lines added since the last ``take``, within the bounds, and the range of lines
        written before that the bounds now cut."""
        with self._lock:
            lines = (*self._head, *self._tail)
            self._head.clear()
            self._tail.clear()
            cut_through = max(0, self._seq - self.tail)
            cut_after = self._cut_after
            if cut_through <= cut_after:
                return Batch(lines)
            self._cut_after = cut_through
            return Batch(lines, cut_after=cut_after, cut_through=cut_through)
