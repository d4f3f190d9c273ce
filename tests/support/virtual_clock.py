"""A clock a test sets, handed to a beat (``ClusterScheduler(clock=...)``) in place of the real
one."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta


class VirtualClock:
    """A settable clock; ``offset`` shifts what one beat reads, as a skewed node clock would."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def shifted(self, seconds: float) -> Callable[[], datetime]:
        return lambda: self.now + timedelta(seconds=seconds)
