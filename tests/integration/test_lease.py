"""The lease contract on PostgreSQL: one holder, expiry by the database clock, growing tokens."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from jobs import lease
from jobs.exceptions import LeaseLost
from jobs.models import Lease

pytestmark = pytest.mark.django_db(transaction=True)


def _wait_until_acquired(key: str, holder: str, ttl: float, within: float) -> lease.HeldLease:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        held = lease.acquire(key, holder, ttl)
        if held is not None:
            return held
        time.sleep(0.02)
    raise AssertionError(f"{holder} could not acquire {key} within {within}s")


def test_first_acquire_gets_token_one_and_a_second_holder_gets_nothing() -> None:
    first = lease.acquire("k", "a", 30)
    assert first is not None and first.token == 1
    assert lease.acquire("k", "b", 30) is None
    assert Lease.objects.get(key="k").holder == "a"


def test_release_frees_at_once_and_next_token_is_higher() -> None:
    first = lease.acquire("k", "a", 30)
    assert first is not None
    assert lease.release(first) is True
    second = lease.acquire("k", "b", 30)
    assert second is not None and second.token == first.token + 1


def test_released_lease_cannot_be_renewed_or_released_again() -> None:
    held = lease.acquire("k", "a", 30)
    assert held is not None
    assert lease.release(held)
    assert lease.renew(held) is None
    assert lease.release(held) is False


def test_expiry_is_judged_by_the_database_clock_and_tokens_keep_growing() -> None:
    tokens = []
    for _ in range(3):
        held = _wait_until_acquired("short", "x", 0.3, within=5)
        tokens.append(held.token)
        assert lease.acquire("short", "y", 0.3) is None  # still live
    assert tokens == sorted(tokens) and len(set(tokens)) == 3


def test_stale_token_cannot_renew_release_or_verify() -> None:
    old = _wait_until_acquired("k", "old", 0.2, within=5)
    new = _wait_until_acquired("k", "new", 30, within=5)
    assert new.token > old.token
    assert lease.renew(old) is None
    assert lease.release(old) is False
    assert Lease.objects.get(key="k").holder == "new"
    with pytest.raises(LeaseLost):
        lease.verify_held("k", old.token)
    lease.verify_held("k", new.token)


def test_renew_extends_and_moves_the_local_deadline() -> None:
    held = lease.acquire("k", "a", 30)
    assert held is not None
    renewed = lease.renew(held)
    assert renewed is not None
    assert renewed.token == held.token
    assert renewed.expires_at >= held.expires_at
    assert renewed.local_deadline >= held.local_deadline


def test_force_release_keeps_the_old_holder_fenced_out() -> None:
    held = lease.acquire("k", "a", 30)
    assert held is not None
    assert lease.force_release("k") is True
    taker = lease.acquire("k", "b", 30)
    assert taker is not None and taker.token == held.token + 1
    assert lease.renew(held) is None
    with pytest.raises(LeaseLost):
        lease.verify_held("k", held.token)


def test_local_deadline_comes_before_database_expiry() -> None:
    before = time.monotonic()
    held = lease.acquire("k", "a", 10)
    assert held is not None
    assert held.local_deadline < before + 10
    assert held.locally_valid


def test_lease_table_is_the_one_the_sql_names() -> None:
    assert Lease._meta.db_table == "jobs_lease"
    assert connection.vendor == "postgresql"
