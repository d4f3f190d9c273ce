"""The lease: one row per lock key, valid while ``expires_at > now()`` by the database clock.

All the SQL that carries guarantees 2 and 3 (one holder per key, fencing) is in this module; the
run-record statements that also take or give back a lease in the same round trip
(``records.claim``, ``records.acquire_for_run``, ``records.finish_fenced``) are built from the
fragments defined here (``TAKE_OVER_IF_LAPSED_PG``, ``RELEASE_EXPIRY_PG``).
Each operation is one statement. The token grows on every acquisition and is stored, so it keeps
growing across expiry, force-release and database restarts. The holder also keeps a local
deadline on the monotonic clock, taken *before* the statement was sent, so it stops acting before
the database could consider its lease lapsed.

Every function takes ``using`` (a Django database alias). PostgreSQL only, as the whole app
(``jobs.checks`` refuses another database at start-up).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

from jobs.database import pooler_hint
from jobs.exceptions import LeaseLost


@dataclass(frozen=True)
class HeldLease:
    """A lease this process holds (or held): a value, never updated in place."""

    key: str
    holder: str
    token: int
    ttl: float
    expires_at: datetime
    local_deadline: float
    # Set by a renewal that found a stop request (overlap ``replace``): who wants the lease.
    stop_requested_by: str = ""

    @property
    def locally_valid(self) -> bool:
        return time.monotonic() < self.local_deadline


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds a live lease, as another would-be holder saw it."""

    holder: str
    token: int


def slot_keys(key: str, slots: int) -> list[str]:
    """The lease keys of a lock that up to ``slots`` runs may hold at once (a job's
    max_concurrency): the key itself for one, else ``key#1`` … ``key#N``, each a lease of its own
    with its own fencing token, tried in that order. The claim function (jobs/sql/claim_run.sql)
    names them the same way."""
    if slots <= 1:
        return [key]
    return [f"{key}#{slot}" for slot in range(1, slots + 1)]


def run_key(key: str, run_id: int) -> str:
    """The lease key of run ``run_id`` when it takes a lease of its own instead of ``key``
    (``JobSpec.lease_per_run``): no other run computes it, so once the run ended nobody takes it
    again, and retention deletes it with the run (``forget``)."""
    return f"{key}:run-{run_id}"


def _safety_margin(ttl: float) -> float:
    # Room for the renewal round trip and scheduler jitter between our clock and the database's.
    return min(1.0, ttl / 10)


def held_from_row(
    key: str, holder: str, ttl: float, token: int, expires_at: datetime, sent_at: float
) -> HeldLease:
    """The lease a successful acquisition statement (sent at ``sent_at``, monotonic) returned."""
    return HeldLease(
        key=key,
        holder=holder,
        token=int(token),
        ttl=ttl,
        expires_at=expires_at,
        local_deadline=sent_at + ttl - _safety_margin(ttl),
    )


# --- PostgreSQL -------------------------------------------------------------------------------
# The heart of guarantee 2: an upsert that takes the row only when its lease lapsed (by the
# database clock), bumping the token. Shared with records.acquire_for_run; the claim's PL/pgSQL
# function (jobs/sql/claim_run.sql) repeats it: change both together
# (tests/integration/test_guarantee_sql.py compares them).
TAKE_OVER_IF_LAPSED_PG = """
ON CONFLICT (key) DO UPDATE
   SET holder = EXCLUDED.holder, token = jobs_lease.token + 1,
       acquired_at = now(), expires_at = EXCLUDED.expires_at, stop_requested_by = ''
 WHERE jobs_lease.expires_at <= now()
"""


def lease_live_pg(lease: str = "jobs_lease", at: str = "now()") -> str:
    """SQL: the lease row aliased ``lease`` is live at ``at``: it expires after it, by the
    database clock (guarantee 2). Every statement that asks whether a lease is held asks it so;
    the ORM's form is ``models.LIVE_LEASE``, and the functions of jobs/sql/ spell it out as
    this writes it (tests/integration/test_guarantee_sql.py holds them to it)."""
    return f"{lease}.expires_at > {at}"


def run_lease_live_pg(at: str = "now()") -> str:
    """SQL: the run aliased ``r`` still holds the lease its token took, live at ``at``. What
    lost-run detection tests, for runs (jobs.guard.run_records) and tenures
    (jobs.continuous.tenures) alike: a run without it is lost."""
    return f"""EXISTS (SELECT 1 FROM jobs_lease AS l
                WHERE l.key = r.lease_key AND l.token = r.fencing_token
                  AND {lease_live_pg("l", at)})"""


_ACQUIRE_PG = f"""
INSERT INTO jobs_lease (key, holder, token, acquired_at, expires_at)
VALUES (%(key)s, %(holder)s, 1, now(), now() + make_interval(secs => %(ttl)s))
{TAKE_OVER_IF_LAPSED_PG}
RETURNING token, expires_at
"""

_RENEW_PG = f"""
UPDATE jobs_lease SET expires_at = now() + make_interval(secs => %(ttl)s)
 WHERE key = %(key)s AND token = %(token)s AND {lease_live_pg()}
RETURNING expires_at, stop_requested_by
"""

# Giving the lease back honours the job's minimum hold (ShedLock's lockAtLeastFor): the lease
# stays live until acquired_at + min_hold, so a fast job cannot run twice for one slot on nodes
# whose clocks disagree. With min_hold 0 it lapses at once. The finish's PL/pgSQL function
# (jobs/sql/finish_run.sql) repeats it: change both together (test_guarantee_sql compares them).
RELEASE_EXPIRY_PG = "GREATEST(now(), jobs_lease.acquired_at + make_interval(secs => %(min_hold)s))"

_RELEASE_PG = f"""
UPDATE jobs_lease SET expires_at = {RELEASE_EXPIRY_PG}
 WHERE key = %(key)s AND token = %(token)s AND {lease_live_pg()}
"""

# Without a token: whoever holds the key (an operator's release). With one: only that holder
# (overlap replace, after the holder it asked to stop did not within a ttl).
_FORCE_RELEASE_PG = f"""
UPDATE jobs_lease SET expires_at = now()
 WHERE key = %(key)s AND {lease_live_pg()} AND (%(token)s::bigint IS NULL OR token = %(token)s)
"""

# Overlap `replace`: flag the live holder; its keeper sees the flag at its next renewal and sets
# ctx.stopping. Returns who was asked, so the asker can wait for exactly that holder to go.
_REQUEST_STOP_PG = f"""
UPDATE jobs_lease SET stop_requested_by = %(requester)s
 WHERE key = %(key)s AND {lease_live_pg()}
RETURNING holder, token
"""

# Fenced write check: FOR SHARE makes a would-be acquirer's upsert wait for our commit.
_VERIFY_PG = f"""
SELECT 1 FROM jobs_lease WHERE key = %(key)s AND token = %(token)s AND {lease_live_pg()}
FOR SHARE
"""

_HOLDER_PG = f"SELECT holder, token FROM jobs_lease WHERE key = %(key)s AND {lease_live_pg()}"

# Retention: the lapsed leases of runs' own keys (run_key), deleted with their runs.
_FORGET_PG = "DELETE FROM jobs_lease WHERE key = ANY(%(keys)s) AND expires_at <= now()"


@contextmanager
def statement_cursor(using: str = DEFAULT_DB_ALIAS) -> Iterator[Any]:
    """The cursor for this module's statements and the run statements of ``jobs.guard.run_records``.

    On PostgreSQL the parameters are bound on the server (Django's own cursors splice them into
    the text, which rules preparing out), and the statements are prepared once per connection
    instead of parsed and planned on every run: that halves what a guarded run costs the
    database. Django leaves prepared statements off for the sake of transaction-mode poolers;
    setting ``OPTIONS["prepare_threshold"]`` in ``DATABASES`` (``None`` behind such a pooler)
    makes these statements follow that setting too. Django's own cursors never prepare.
    Django's checks (thread sharing, broken transaction, health check) and error classes apply
    as for its own cursors.
    """
    connection = connections[using]
    # What connection.cursor() checks, without making the Django cursor this would not use
    # (a guarded run's two statements pay for it on every run).
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_no_broken_transaction()
    connection.validate_thread_sharing()
    raw_connection = connection.connection
    if "prepare_threshold" not in connection.settings_dict.get("OPTIONS", {}):
        raw_connection.prepare_threshold = 0
    try:
        with connection.wrap_database_errors, psycopg.Cursor(raw_connection) as cursor:
            yield cursor
    except DatabaseError as exc:
        # Prepared here: behind a transaction pooler without the setting, these fail first.
        pooler_hint.note(exc, database=connection.settings_dict)
        raise


def _execute(using: str, statement: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
    """Run one statement; its first row (if it returns rows) and nothing else."""
    with statement_cursor(using) as cursor:
        cursor.execute(statement, params)
        if cursor.description is None:
            return (cursor.rowcount,)
        row = cursor.fetchone()
    return None if row is None else tuple(row)


def acquire(
    key: str, holder: str, ttl: float, *, using: str = DEFAULT_DB_ALIAS
) -> HeldLease | None:
    """Take the lease on ``key`` if nobody holds a live one; ``None`` otherwise."""
    sent_at = time.monotonic()
    row = _execute(using, _ACQUIRE_PG, {"key": key, "holder": holder, "ttl": ttl})
    if row is None:
        return None
    return held_from_row(key, holder, ttl, row[0], row[1], sent_at)


def renew(lease: HeldLease, *, using: str = DEFAULT_DB_ALIAS) -> HeldLease | None:
    """Extend a live lease by its ttl; ``None`` if it lapsed, was released or was taken over.

    The renewed value carries ``stop_requested_by`` when another run asked this holder to stop.
    """
    sent_at = time.monotonic()
    row = _execute(
        using,
        _RENEW_PG,
        {"key": lease.key, "token": lease.token, "ttl": lease.ttl},
    )
    if row is None:
        return None
    return replace(
        lease,
        expires_at=row[0],
        local_deadline=sent_at + lease.ttl - _safety_margin(lease.ttl),
        stop_requested_by=row[1] or "",
    )


def release(lease: HeldLease, *, min_hold: float = 0, using: str = DEFAULT_DB_ALIAS) -> bool:
    """Give the lease back: at once, or at ``acquired_at + min_hold`` if that is later.

    A no-op (``False``) for a stale token, so a released handle cannot be used again.
    """
    row = _execute(
        using,
        _RELEASE_PG,
        {"key": lease.key, "token": lease.token, "min_hold": min_hold},
    )
    return row == (1,)


def force_release(key: str, *, token: int | None = None, using: str = DEFAULT_DB_ALIAS) -> bool:
    """Release whoever holds ``key`` (an operator's action), or only the holder of ``token``.
    The holder stays fenced out: the next acquisition gets a higher token and the old holder's
    renewals and fenced writes fail."""
    params: dict[str, Any] = {"key": key, "token": token}
    return _execute(using, _FORCE_RELEASE_PG, params) == (1,)


def request_stop(key: str, requester: str, *, using: str = DEFAULT_DB_ALIAS) -> LeaseHolder | None:
    """Ask the live holder of ``key`` to stop (it sees the request at its next renewal).

    Returns the holder asked, or ``None`` when nobody holds a live lease on ``key``.
    """
    row = _execute(using, _REQUEST_STOP_PG, {"key": key, "requester": requester})
    return None if row is None else LeaseHolder(holder=row[0], token=int(row[1]))


def current_holder(key: str, *, using: str = DEFAULT_DB_ALIAS) -> LeaseHolder | None:
    """The live holder of ``key`` by the database clock, if any."""
    row = _execute(using, _HOLDER_PG, {"key": key})
    return None if row is None else LeaseHolder(holder=row[0], token=int(row[1]))


def forget(run_keys: list[str], *, using: str = DEFAULT_DB_ALIAS) -> int:
    """Delete the leases of ``run_keys`` (``run_key``s of ended runs) that have lapsed, by the
    database clock; how many. Never a live one, and never another kind of key: a deleted
    key's token would start again at 1."""
    if not run_keys:
        return 0
    row = _execute(using, _FORGET_PG, {"keys": run_keys})
    return int(row[0]) if row else 0


def verify_held(key: str, token: int, *, using: str = DEFAULT_DB_ALIAS) -> None:
    """Inside a transaction: raise ``LeaseLost`` unless ``token`` holds a live lease on ``key``,
    and (PostgreSQL) keep any new acquirer waiting until this transaction ends."""
    if _execute(using, _VERIFY_PG, {"key": key, "token": token}) is None:
        raise LeaseLost(f"lease {key!r} with token {token} is no longer held")
