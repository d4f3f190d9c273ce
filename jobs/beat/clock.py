"""The database's clock as a beat reads it: the machine's clock plus its measured offset to
PostgreSQL's clock, never ahead of it.

More in docs/architecture.md, "Module notes".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django.utils import timezone

from jobs.database.database_clock import database_instant

log = logging.getLogger(__name__)

REFRESH_SECONDS = 5.0
# A measurement reads the database's clock up to this many times and keeps the read with the
# shortest round trip: one slow read (a busy machine) then costs lateness, not a wrong offset.
SAMPLES = 3
# A round trip this short is good enough to stop sampling.
GOOD_ROUND_TRIP = timedelta(milliseconds=2)
# The machine's clock moved this much more or less than the monotonic clock since the last
# measurement: it was stepped (NTP, an operator), so the offset is measured again at once.
STEP = timedelta(milliseconds=1)


class DatabaseClock:
    """Callable like ``timezone.now``; ``local`` is the machine's clock (tests shift it)."""

    def __init__(
        self,
        local: Callable[[], datetime] = timezone.now,
        read_database: Callable[[], datetime] = database_instant,
        refresh_seconds: float = REFRESH_SECONDS,
    ) -> None:
        self._local = local
        self._read_database = read_database
        self._refresh_seconds = refresh_seconds
        self._offset = timedelta(0)
        self._measured_at: tuple[float, datetime] | None = None  # (monotonic, machine) clocks

    def __call__(self) -> datetime:
        local, monotonic = self._local(), time.monotonic()
        if self._is_stale(monotonic, local):
            self.measure()
            local = self._local()
        return local + self._offset

    @property
    def offset(self) -> timedelta:
        """What is added to the machine's clock: the database's clock minus the machine's, the
        smallest value the last measurement allows (so the clock never reads ahead)."""
        return self._offset

    def measure(self) -> None:
        best: tuple[timedelta, timedelta] | None = None  # (round trip, offset)
        for _ in range(SAMPLES):
            before = self._local()
            database = self._read_database()
            after = self._local()
            # The database read its clock somewhere between ``before`` and ``after``; taking
            # ``after`` gives the smallest offset possible, so a slot never fires early (at most
            # one round trip late).
            sample = (after - before, database - after)
            if best is None or sample[0] < best[0]:
                best = sample
            if best[0] <= GOOD_ROUND_TRIP:
                break
        assert best is not None
        round_trip, self._offset = best
        self._measured_at = (time.monotonic(), self._local())
        log.debug(
            "database clock offset %.6f s (round trip %.6f s)",
            self._offset.total_seconds(),
            round_trip.total_seconds(),
            extra={"action": "database_clock"},
        )

    def _is_stale(self, monotonic: float, local: datetime) -> bool:
        if self._measured_at is None:
            return True
        measured_monotonic, measured_local = self._measured_at
        elapsed = monotonic - measured_monotonic
        if elapsed >= self._refresh_seconds:
            return True
        stepped = (local - measured_local) - timedelta(seconds=elapsed)
        return abs(stepped) > STEP
