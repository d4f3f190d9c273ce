"""The database's clock as a beat reads it: the machine's clock plus its measured offset to
PostgreSQL's ``now()``.

More in docs/architecture.md, "Module notes".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django.utils import timezone

from jobs.database_clock import database_now

log = logging.getLogger(__name__)

REFRESH_SECONDS = 5.0


class DatabaseClock:
    """Callable like ``timezone.now``; ``local`` is the machine's clock (tests shift it)."""

    def __init__(
        self,
        local: Callable[[], datetime] = timezone.now,
        read_database: Callable[[], datetime] = database_now,
        refresh_seconds: float = REFRESH_SECONDS,
    ) -> None:
        self._local = local
        self._read_database = read_database
        self._refresh_seconds = refresh_seconds
        self._offset = timedelta(0)
        self._next_refresh = float("-inf")  # monotonic time of the next measurement

    def __call__(self) -> datetime:
        if time.monotonic() >= self._next_refresh:
            self.measure()
        return self._local() + self._offset

    @property
    def offset(self) -> timedelta:
        """What is added to the machine's clock: the database's clock minus the machine's."""
        return self._offset

    def measure(self) -> None:
        before = self._local()
        database = self._read_database()
        after = self._local()
        self._offset = database - (before + (after - before) / 2)
        self._next_refresh = time.monotonic() + self._refresh_seconds
        log.debug(
            "database clock offset %.6f s (round trip %.6f s)",
            self._offset.total_seconds(),
            (after - before).total_seconds(),
            extra={"action": "database_clock"},
        )
