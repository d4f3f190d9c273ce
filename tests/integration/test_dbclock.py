"""The database clock a beat fires by (jobs.beat.clock), against real PostgreSQL: a machine clock
2 minutes off reads the database's time to within a few milliseconds."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from django.db import DatabaseError
from django.utils import timezone

from jobs.beat.clock import DatabaseClock
from jobs.beat.scheduler import system_clock
from jobs.database_clock import database_now

pytestmark = pytest.mark.django_db

# Two round trips to a local database, with room for a busy machine.
CLOSE = timedelta(milliseconds=50)


def _error(clock: Callable[[], datetime]) -> timedelta:
    """How far ``clock`` reads from the database's clock (bracketed by two reads of it)."""
    before = database_now()
    read = clock()
    after = database_now()
    return max(before - read, read - after, timedelta(0))


@pytest.mark.parametrize("skew", [120.0, -120.0, 0.0])
def test_a_skewed_machine_clock_reads_the_database_clock(skew: float) -> None:
    clock = DatabaseClock(system_clock(skew))
    assert _error(clock) <= CLOSE
    assert abs(clock.offset + timedelta(seconds=skew)) <= CLOSE


def test_the_offset_is_measured_again_after_the_refresh_period() -> None:
    skew = [0.0]
    clock = DatabaseClock(lambda: timezone.now() + timedelta(seconds=skew[0]), refresh_seconds=0)
    assert _error(clock) <= CLOSE
    skew[0] = 120.0  # the machine's clock steps 2 minutes ahead
    assert _error(clock) <= CLOSE
    assert abs(clock.offset + timedelta(seconds=120)) <= CLOSE


def test_between_refreshes_the_machine_clock_advances_it() -> None:
    reads: list[datetime] = []

    def database() -> datetime:
        reads.append(database_now())
        return reads[-1]

    clock = DatabaseClock(system_clock(-120.0), read_database=database, refresh_seconds=3600)
    first, second = clock(), clock()
    assert len(reads) == 1  # one measurement for both readings
    assert first <= second and _error(clock) <= CLOSE


def test_a_failed_measurement_raises_the_database_error() -> None:
    def unreachable() -> datetime:
        raise DatabaseError("connection refused")

    with pytest.raises(DatabaseError):
        DatabaseClock(read_database=unreachable)()
