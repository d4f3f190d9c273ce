"""State a process keeps about itself, such as what it has already reported.

A worker's pool processes are forked from its main process: a child must start afresh rather
than carry on with what its parent saw and said, so each piece of state remembers the process
that made it and a module swaps in a fresh one when another process asks (``mine``). What such
state is recorded for (``/healthz``'s configuration problems) is written at most once every so
often per process (``ProcessState.record_due``), not on every event.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar


class ProcessState:
    """The base of a module's state for the process that made it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.last_recorded: float | None = None

    def record_due(self, every: float) -> bool:
        """Whether ``every`` seconds passed since the last record (or there was none); if so,
        this one counts as made now."""
        now = time.monotonic()
        with self.lock:
            due = self.last_recorded is None or now - self.last_recorded >= every
            if due:
                self.last_recorded = now
        return due


State = TypeVar("State", bound=ProcessState)


def mine(state: State, fresh: Callable[[], State]) -> State:
    """``state`` if this process made it, else ``fresh()``: a forked child's own."""
    return state if state.pid == os.getpid() else fresh()
