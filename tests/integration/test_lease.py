"""The lease contract on PostgreSQL: one holder, expiry by the database clock, tokens that keep
growing, stale handles that can do nothing."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import DEFAULT_DB_ALIAS, connection, transaction
from django.utils import timezone

from jobs.exceptions import LeaseLost
from jobs.guard import lease
from jobs.models import Lease

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def using() -> str:
    """The database alias the lease functions run against."""
    assert connection.vendor == "postgresql"
    return DEFAULT_DB_ALIAS


def _wait_until_acquired(
    key: str, holder: str, ttl: float, within: float, using: str
) -> lease.HeldLease:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        held = lease.acquire(key, holder, ttl, using=using)
        if held is not None:
            return held
        time.sleep(0.02)
    raise AssertionError(f"{holder} could not acquire {key} within {within}s")


def _row(key: str, using: str) -> Lease:
    return Lease.objects.using(using).get(key=key)


def test_first_acquire_gets_token_one_and_a_second_holder_gets_nothing(using: str) -> None:
    first = lease.acquire("k", "a", 30, using=using)
    assert first is not None and first.token == 1
    assert lease.acquire("k", "b", 30, using=using) is None
    assert _row("k", using).holder == "a"
    assert lease.current_holder("k", using=using) == lease.LeaseHolder("a", 1)


def test_release_frees_at_once_and_next_token_is_higher(using: str) -> None:
    first = lease.acquire("k", "a", 30, using=using)
    assert first is not None
    assert lease.release(first, using=using) is True
    assert lease.current_holder("k", using=using) is None
    second = lease.acquire("k", "b", 30, using=using)
    assert second is not None and second.token == first.token + 1


def test_released_lease_cannot_be_renewed_or_released_again(using: str) -> None:
    held = lease.acquire("k", "a", 30, using=using)
    assert held is not None
    assert lease.release(held, using=using)
    assert lease.renew(held, using=using) is None
    assert lease.release(held, using=using) is False


def test_expiry_is_judged_by_the_database_clock_and_tokens_keep_growing(using: str) -> None:
    tokens = []
    for _ in range(3):
        held = _wait_until_acquired("short", "x", 0.3, within=5, using=using)
        tokens.append(held.token)
        assert lease.acquire("short", "y", 0.3, using=using) is None  # still live
    assert tokens == sorted(tokens) and len(set(tokens)) == 3


def test_the_node_clock_plays_no_part(using: str, monkeypatch: pytest.MonkeyPatch) -> None:
    held = lease.acquire("k", "a", 30, using=using)
    assert held is not None
    # This node's wall clock jumps an hour ahead: the lease is still live in the database.
    later = time.time() + 3600
    monkeypatch.setattr(time, "time", lambda: later)
    monkeypatch.setattr(timezone, "now", lambda: datetime.now(UTC) + timedelta(hours=1))
    assert lease.acquire("k", "b", 30, using=using) is None
    assert lease.renew(held, using=using) is not None


def test_stale_token_cannot_renew_release_or_verify(using: str) -> None:
    old = _wait_until_acquired("k", "old", 0.2, within=5, using=using)
    new = _wait_until_acquired("k", "new", 30, within=5, using=using)
    assert new.token > old.token
    assert lease.renew(old, using=using) is None
    assert lease.release(old, using=using) is False
    assert _row("k", using).holder == "new"
    with pytest.raises(LeaseLost):
        lease.verify_held("k", old.token, using=using)
    lease.verify_held("k", new.token, using=using)


def test_renew_extends_and_moves_the_local_deadline(using: str) -> None:
    held = lease.acquire("k", "a", 30, using=using)
    assert held is not None
    renewed = lease.renew(held, using=using)
    assert renewed is not None
    assert renewed.token == held.token
    assert renewed.expires_at >= held.expires_at
    assert renewed.local_deadline >= held.local_deadline
    assert renewed.stop_requested_by == ""


def test_a_lapsed_lease_cannot_be_renewed(using: str) -> None:
    held = lease.acquire("k", "a", 0.2, using=using)
    assert held is not None
    _wait_until_acquired("k", "b", 30, within=5, using=using)
    assert lease.renew(held, using=using) is None


def test_force_release_keeps_the_old_holder_fenced_out(using: str) -> None:
    held = lease.acquire("k", "a", 30, using=using)
    assert held is not None
    assert lease.force_release("k", using=using) is True
    assert lease.force_release("k", using=using) is False  # nothing live to release
    taker = lease.acquire("k", "b", 30, using=using)
    assert taker is not None and taker.token == held.token + 1
    assert lease.renew(held, using=using) is None
    with pytest.raises(LeaseLost):
        lease.verify_held("k", held.token, using=using)


def test_force_release_with_a_token_releases_only_that_holder(using: str) -> None:
    held = lease.acquire("k", "a", 30, using=using)
    assert held is not None
    assert lease.force_release("k", token=held.token + 1, using=using) is False
    assert lease.force_release("k", token=held.token, using=using) is True


def test_local_deadline_comes_before_database_expiry(using: str) -> None:
    before = time.monotonic()
    held = lease.acquire("k", "a", 10, using=using)
    assert held is not None
    assert held.local_deadline < before + 10
    assert held.locally_valid


def test_release_keeps_the_lease_for_its_minimum_hold(using: str) -> None:
    held = lease.acquire("k", "a", 30, using=using)
    assert held is not None
    assert lease.release(held, min_hold=0.6, using=using)
    assert lease.acquire("k", "b", 30, using=using) is None  # held until acquired_at + 0.6 s
    assert lease.current_holder("k", using=using) == lease.LeaseHolder("a", held.token)
    taker = _wait_until_acquired("k", "b", 30, within=5, using=using)
    assert taker.token == held.token + 1


def test_a_minimum_hold_already_served_releases_at_once(using: str) -> None:
    held = lease.acquire("k", "a", 30, using=using)
    assert held is not None
    time.sleep(0.3)  # the run itself took longer than its minimum hold
    assert lease.release(held, min_hold=0.1, using=using)
    assert lease.acquire("k", "b", 30, using=using) is not None


def test_forget_deletes_only_the_lapsed_leases_it_names(using: str) -> None:
    ended, live, other = (lease.run_key("job:j", run_id) for run_id in (1, 2, 3))
    for key in (ended, live, other):
        assert lease.acquire(key, "a", 30, using=using) is not None
    assert lease.force_release(ended, using=using) and lease.force_release(other, using=using)
    assert lease.forget([ended, live], using=using) == 1
    remaining = Lease.objects.using(using).values_list("key", flat=True)
    assert sorted(remaining) == sorted([live, other]), "the live one and the unnamed one stay"
    assert lease.forget([], using=using) == 0


def test_a_stop_request_reaches_the_holder_at_its_renewal_and_ends_with_it(using: str) -> None:
    held = lease.acquire("k", "a", 30, using=using)
    assert held is not None
    asked = lease.request_stop("k", "b:run-2", using=using)
    assert asked == lease.LeaseHolder("a", held.token)
    renewed = lease.renew(held, using=using)
    assert renewed is not None and renewed.stop_requested_by == "b:run-2"
    assert lease.release(renewed, using=using)
    assert lease.request_stop("k", "c", using=using) is None  # nobody to ask
    taker = lease.acquire("k", "b", 30, using=using)
    assert taker is not None
    again = lease.renew(taker, using=using)
    assert again is not None and again.stop_requested_by == ""  # the new holder starts clean


def test_a_fenced_transaction_holds_off_the_next_acquirer_until_it_commits() -> None:
    # FOR SHARE is the mechanism.
    using = DEFAULT_DB_ALIAS
    held = lease.acquire("k", "a", 0.5, using=using)
    assert held is not None
    verified = threading.Event()
    # Taken at the end of the transaction, just before its commit: the taker's statement cannot
    # return before the commit, but the commit may return to us after the taker did.
    about_to_commit: list[float] = []

    def fenced_writer() -> None:
        try:
            with transaction.atomic():
                lease.verify_held("k", held.token)
                verified.set()
                time.sleep(1.5)  # a slow write, outlasting the lease
                about_to_commit.append(time.monotonic())
        finally:
            connection.close()

    writer = threading.Thread(target=fenced_writer)
    writer.start()
    assert verified.wait(5)
    deadline = time.monotonic() + 5
    while lease.current_holder("k") is not None:  # lapsed by the database clock
        assert time.monotonic() < deadline
        time.sleep(0.02)
    taker = lease.acquire("k", "b", 30)
    acquired_at = time.monotonic()
    writer.join(5)
    assert taker is not None and taker.token == held.token + 1
    assert about_to_commit and acquired_at >= about_to_commit[0]
