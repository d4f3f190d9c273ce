"""Fuzz: 8 OS processes, 200 acquisitions each of one lease, on PostgreSQL.

Each holder increments a counter with a deliberately racy read-then-write (so any overlap of two
holders loses an increment) and logs (start, end, token) on the machine-wide monotonic clock.
The total must be exact, no two intervals may overlap, and tokens must grow in time order.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import random
import time
from pathlib import Path

import pytest
from django.db import connection

from tests.acceptance.conftest import live_database_url

pytestmark = pytest.mark.django_db(transaction=True)

PROCESSES = 8
ROUNDS = 200
KEY = "fuzz"
TTL = 30.0  # never reached: each holder releases at once, so every handoff is a release


def _contend(worker: int, database_url: str, out: str, start: object) -> None:
    """One process: ROUNDS acquisitions, each a racy increment under the lease."""
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.db import connection as conn

    from jobs.guard import lease

    holder = f"fuzz-{worker}:{os.getpid()}"
    lines = []
    start.wait()  # type: ignore[attr-defined]
    for _ in range(ROUNDS):
        held = lease.acquire(KEY, holder, TTL)
        while held is None:
            time.sleep(random.uniform(0, 0.005))
            held = lease.acquire(KEY, holder, TTL)
        began = time.monotonic_ns()
        with conn.cursor() as cursor:
            cursor.execute("SELECT n FROM lease_fuzz_counter WHERE id = 1")
            (n,) = cursor.fetchone()
            cursor.execute("UPDATE lease_fuzz_counter SET n = %s WHERE id = 1", [n + 1])
        ended = time.monotonic_ns()
        if not lease.release(held):
            raise AssertionError(f"{holder} could not release token {held.token}")
        lines.append(f"{began} {ended} {held.token}")
    Path(out).write_text("\n".join(lines) + "\n")
    conn.close()


@pytest.fixture
def counter() -> object:
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE lease_fuzz_counter (id int PRIMARY KEY, n int NOT NULL)")
        cursor.execute("INSERT INTO lease_fuzz_counter VALUES (1, 0)")
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE lease_fuzz_counter")


def test_eight_processes_never_overlap_and_lose_no_increment(
    counter: object, tmp_path: Path
) -> None:
    spawn = multiprocessing.get_context("spawn")
    start = spawn.Barrier(PROCESSES)
    url = live_database_url()
    outs = [tmp_path / f"worker-{i}.log" for i in range(PROCESSES)]
    workers = [
        spawn.Process(target=_contend, args=(i, url, str(outs[i]), start)) for i in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=180)
    assert [w.exitcode for w in workers] == [0] * PROCESSES

    with connection.cursor() as cursor:
        cursor.execute("SELECT n FROM lease_fuzz_counter WHERE id = 1")
        assert cursor.fetchone() == (PROCESSES * ROUNDS,)

    intervals = sorted(
        tuple(int(field) for field in line.split())
        for out in outs
        for line in out.read_text().splitlines()
    )
    assert len(intervals) == PROCESSES * ROUNDS
    overlaps = [(a, b) for a, b in itertools.pairwise(intervals) if b[0] <= a[1]]
    assert overlaps == []
    tokens = [token for _, _, token in intervals]
    assert all(a < b for a, b in itertools.pairwise(tokens)), "tokens out of order"
    assert tokens == list(range(tokens[0], tokens[0] + PROCESSES * ROUNDS))
