"""A run's log read back: its lines after a cursor, with a line saying how many were cut where
the bounds cut them, and whether the run finished (so a follower knows it has everything).

The cursor is the number (``seq``) of the last line read; 0 reads from the start. The run's status
is read before its lines: the worker writes a run's last lines before its outcome, so lines read
after a finished status are all there are.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobs.exceptions import NotFound
from jobs.models import TERMINAL_STATUSES, JobRun, RunLogLine

CUT = "CUT"
DEFAULT_LIMIT = 1000
MAX_LIMIT = 5000


@dataclass(frozen=True)
class Entry:
    """A line of the log, or (``cut`` > 0) the note that ``cut`` lines were cut here."""

    seq: int | None
    at: datetime | None
    level: str
    message: str
    cut: int = 0

    def record(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at": None if self.at is None else self.at.isoformat(timespec="milliseconds"),
            "level": self.level,
            "message": self.message,
            "cut": self.cut,
        }

    def text(self) -> str:
        """The entry as one line of text (a message's own line breaks kept)."""
        if self.cut:
            return self.message
        at = "" if self.at is None else self.at.isoformat(timespec="milliseconds")
        return f"{at} {self.level} {self.message}"


@dataclass(frozen=True)
class Page:
    run_id: int
    status: str
    entries: tuple[Entry, ...]
    cursor: int
    # The run ended and nothing is left after ``cursor``: following can stop.
    finished: bool
    # More lines follow ``cursor`` already (the page was full): ask again at once.
    more: bool = False

    def record(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "status": self.status,
            "lines": [entry.record() for entry in self.entries],
            "cursor": self.cursor,
            "finished": self.finished,
        }


def cut_note(count: int) -> Entry:
    return Entry(None, None, CUT, f"[{count} line{'s' if count != 1 else ''} cut]", cut=count)


def page(run_id: int, after: int = 0, limit: int = DEFAULT_LIMIT) -> Page:
    """Run ``run_id``'s lines numbered after ``after``, at most ``limit`` of them (the notes of
    cut lines aside); ``NotFound`` for a run that does not exist."""
    status = JobRun.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if status is None:
        raise NotFound(f"no run with id {run_id}")
    rows = list(
        RunLogLine.objects.filter(run_id=run_id, seq__gt=after)
        .order_by("seq")
        .values_list("seq", "at", "level", "message")[: limit + 1]
    )
    more = len(rows) > limit
    entries: list[Entry] = []
    previous = after
    for seq, at, level, message in rows[:limit]:
        if seq > previous + 1:
            entries.append(cut_note(seq - previous - 1))
        entries.append(Entry(seq, at, level, message))
        previous = seq
    return Page(
        run_id=run_id,
        status=status,
        entries=tuple(entries),
        cursor=previous,
        finished=status in TERMINAL_STATUSES and not more,
        more=more,
    )
