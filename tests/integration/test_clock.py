"""The database clock a beat fires by (jobs.beat.clock), against real PostgreSQL: a machine clock
2 minutes off reads the database's time to within a few milliseconds, and never ahead of it, even
when a measurement's round trip is slow."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from django.db import DatabaseError
from django.utils import timezone

from jobs.beat.clock import DatabaseClock
from jobs.beat.scheduler import system_clock
from jobs.database.database_clock import database_instant, database_now

pytestmark = pytest.mark.django_db

# Two round trips to a local database, with room for a busy machine.
CLOSE = timedelta(milliseconds=50)


def _error(clock: Callable[[], datetime]) -> timedelta:
    """How far ``clock`` reads from the database's clock (bracketed by two reads of it)."""
    before = database_instant()
    read = clock()
    after = database_instant()
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
        # The database's clock at this instant: now() would be the test transaction's start.
        reads.append(database_instant())
        return reads[-1]

    clock = DatabaseClock(system_clock(-120.0), read_database=database, refresh_seconds=3600)
    first = clock()
    measured = len(reads)
    second = clock()
    assert len(reads) == measured  # one measurement for both readings
    assert first <= second and _error(clock) <= CLOSE


def _slow_once(before: float, after: float = 0.0) -> Callable[[], datetime]:
    """The database's clock read with ``before`` s of latency on the way there and ``after`` s on
    the way back, the first time only (a busy machine)."""
    reads: list[datetime] = []

    def read() -> datetime:
        first = not reads
        if first:
            time.sleep(before)
        reads.append(database_instant())
        if first:
            time.sleep(after)
        return reads[-1]

    return read


def test_a_slow_round_trip_makes_the_clock_late_never_early() -> None:
    """A first sample that waited 0.1 s on its way to the database: by the midpoint rule the clock
    would read 50 ms ahead; it keeps the fastest of its samples and is close and never ahead."""
    clock = DatabaseClock(system_clock(120.0), read_database=_slow_once(0.1), refresh_seconds=3600)
    for _ in range(20):
        assert clock() <= database_instant()
    assert _error(clock) <= CLOSE


@pytest.mark.parametrize("before, after", [(0.1, 0.0), (0.0, 0.1), (0.05, 0.05)])
def test_even_one_slow_sample_alone_never_reads_ahead(
    monkeypatch: pytest.MonkeyPatch, before: float, after: float
) -> None:
    """Wherever the latency of a 0.1 s round trip falls, the clock reads behind the database's
    and by no more than that round trip."""
    monkeypatch.setattr("jobs.beat.clock.SAMPLES", 1)
    clock = DatabaseClock(
        system_clock(-120.0), read_database=_slow_once(before, after), refresh_seconds=3600
    )
    assert clock() <= database_instant()
    assert database_instant() - clock() <= timedelta(milliseconds=100) + CLOSE


def test_a_step_of_the_machine_clock_is_measured_again_at_once() -> None:
    """NTP or an operator steps the machine's clock 2 minutes ahead between two readings: the
    clock sees its wall and monotonic clocks disagree and measures again, long before the refresh
    period ends, so it neither fires two minutes of slots early nor any late."""
    skew = [0.0]
    reads: list[datetime] = []

    def database() -> datetime:
        reads.append(database_instant())
        return reads[-1]

    clock = DatabaseClock(
        lambda: timezone.now() + timedelta(seconds=skew[0]),
        read_database=database,
        refresh_seconds=3600,
    )
    clock()
    measured = len(reads)
    clock()
    assert len(reads) == measured  # no step: no new measurement
    skew[0] = 120.0
    assert _error(clock) <= CLOSE
    assert len(reads) > measured
    assert abs(clock.offset + timedelta(seconds=120)) <= CLOSE


def test_the_clock_is_read_at_the_instant_not_at_the_transaction_start() -> None:
    """Inside a transaction ``now()`` is its start; the clock reads ``clock_timestamp()``."""
    from django.db import transaction

    with transaction.atomic():
        started = database_now()
        time.sleep(0.05)  # the transaction has been open a while when the beat measures
        clock = DatabaseClock()
        assert clock() - started >= timedelta(milliseconds=50)


def test_a_failed_measurement_raises_the_database_error() -> None:
    def unreachable() -> datetime:
        raise DatabaseError("connection refused")

    with pytest.raises(DatabaseError):
        DatabaseClock(read_database=unreachable)()
