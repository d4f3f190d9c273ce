"""The database's clock as a beat reads it: the machine's clock plus its measured offset to
PostgreSQL's ``now()``.

A beat fires a slot when its clock reaches it. By the machine's clock, a beat whose clock runs
2 minutes ahead would start every run 2 minutes early (the claim checks lateness, not
earliness), and one 2 minutes behind would fire each slot 2 minutes late. The database clock is
already the cluster's one reference (leases, start deadlines, catch-up, maintenance), so beats
fire by it too: every beat then fires a slot within about a millisecond of its time, whatever
its machine's clock says. Slot identity does not depend on it (slots come from the schedule).

Reading ``now()`` on every tick would cost a round trip per tick. The offset is measured every
``REFRESH_SECONDS`` instead: one ``SELECT now()`` between two readings of the machine's clock,
the database's time taken at their midpoint, so the offset is wrong by at most half the round
trip. The machine's clock advances it between measurements, which also corrects its drift and
any step it takes (NTP) within ``REFRESH_SECONDS``. A measurement that fails raises the
database's error, as every other statement of the tick would.
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
