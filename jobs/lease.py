"""The lease: one row per lock key, valid while ``expires_at > now()`` by the database clock.

All the SQL that carries guarantees 2 and 3 (one holder per key, fencing) is in this module.
Each operation is one statement. The token grows on every acquisition and is stored, so it keeps
growing across expiry, force-release and database restarts. The holder also keeps a local
deadline on the monotonic clock, taken *before* the statement was sent, so it stops acting before
the database could consider its lease lapsed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from django.db import connection
from django.utils.dateparse import parse_datetime

from jobs.exceptions import LeaseLost


@dataclass(frozen=True)
class HeldLease:
    key: str
    holder: str
    token: int
    ttl: float
    expires_at: datetime
    local_deadline: float

    @property
    def locally_valid(self) -> bool:
        return time.monotonic() < self.local_deadline


def _safety_margin(ttl: float) -> float:
    # Room for the renewal round trip and scheduler jitter between our clock and the database's.
    return min(1.0, ttl / 10)


_ACQUIRE_PG = """
INSERT INTO jobs_lease (key, holder, token, acquired_at, expires_at)
VALUES (%(key)s, %(holder)s, 1, now(), now() + make_interval(secs => %(ttl)s))
ON CONFLICT (key) DO UPDATE
   SET holder = EXCLUDED.holder, token = jobs_lease.token + 1,
       acquired_at = now(), expires_at = EXCLUDED.expires_at
 WHERE jobs_lease.expires_at <= now()
RETURNING token, expires_at
"""

_RENEW_PG = """
UPDATE jobs_lease SET expires_at = now() + make_interval(secs => %(ttl)s)
 WHERE key = %(key)s AND token = %(token)s AND expires_at > now()
RETURNING expires_at
"""

_RELEASE_PG = """
UPDATE jobs_lease SET expires_at = now()
 WHERE key = %(key)s AND token = %(token)s AND expires_at > now()
"""

_FORCE_RELEASE_PG = (
    "UPDATE jobs_lease SET expires_at = now() WHERE key = %(key)s AND expires_at > now()"
)

# Fenced write check: FOR SHARE makes a would-be acquirer's upsert wait for our commit.
_VERIFY_PG = """
SELECT 1 FROM jobs_lease WHERE key = %(key)s AND token = %(token)s AND expires_at > now()
FOR SHARE
"""

# SQLite (the embedded fallback) has one writer at a time, which serves FOR SHARE's purpose.
# Timestamps are stored the way Django stores them there: UTC text, compared as text.
_NOW_SQLITE = "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')"
_LATER_SQLITE = "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '+' || %(ttl)s || ' seconds')"

_ACQUIRE_SQLITE = f"""
INSERT INTO jobs_lease (key, holder, token, acquired_at, expires_at)
VALUES (%(key)s, %(holder)s, 1, {_NOW_SQLITE}, {_LATER_SQLITE})
ON CONFLICT (key) DO UPDATE
   SET holder = excluded.holder, token = jobs_lease.token + 1,
       acquired_at = excluded.acquired_at, expires_at = excluded.expires_at
 WHERE jobs_lease.expires_at <= {_NOW_SQLITE}
RETURNING token, expires_at
"""

_RENEW_SQLITE = f"""
UPDATE jobs_lease SET expires_at = {_LATER_SQLITE}
 WHERE key = %(key)s AND token = %(token)s AND expires_at > {_NOW_SQLITE}
RETURNING expires_at
"""

_RELEASE_SQLITE = f"""
UPDATE jobs_lease SET expires_at = {_NOW_SQLITE}
 WHERE key = %(key)s AND token = %(token)s AND expires_at > {_NOW_SQLITE}
"""

_FORCE_RELEASE_SQLITE = (
    f"UPDATE jobs_lease SET expires_at = {_NOW_SQLITE} "
    f"WHERE key = %(key)s AND expires_at > {_NOW_SQLITE}"
)

_VERIFY_SQLITE = (
    f"SELECT 1 FROM jobs_lease WHERE key = %(key)s AND token = %(token)s "
    f"AND expires_at > {_NOW_SQLITE}"
)


def _sql(postgres: str, sqlite: str) -> str:
    return sqlite if connection.vendor == "sqlite" else postgres


def _as_datetime(value: datetime | str) -> datetime:
    """PostgreSQL returns aware datetimes; SQLite returns the UTC text it stores."""
    if isinstance(value, datetime):
        return value
    parsed = parse_datetime(value)
    if parsed is None:
        raise ValueError(f"unexpected timestamp from the database: {value!r}")
    return parsed.replace(tzinfo=UTC)


def acquire(key: str, holder: str, ttl: float) -> HeldLease | None:
    """Take the lease on ``key`` if nobody holds a live one; ``None`` otherwise."""
    sent_at = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute(
            _sql(_ACQUIRE_PG, _ACQUIRE_SQLITE), {"key": key, "holder": holder, "ttl": ttl}
        )
        row = cursor.fetchone()
    if row is None:
        return None
    return HeldLease(
        key=key,
        holder=holder,
        token=int(row[0]),
        ttl=ttl,
        expires_at=_as_datetime(row[1]),
        local_deadline=sent_at + ttl - _safety_margin(ttl),
    )


def renew(lease: HeldLease) -> HeldLease | None:
    """Extend a live lease by its ttl; ``None`` if it lapsed, was released or was taken over."""
    sent_at = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute(
            _sql(_RENEW_PG, _RENEW_SQLITE),
            {"key": lease.key, "token": lease.token, "ttl": lease.ttl},
        )
        row = cursor.fetchone()
    if row is None:
        return None
    return replace(
        lease,
        expires_at=_as_datetime(row[0]),
        local_deadline=sent_at + lease.ttl - _safety_margin(lease.ttl),
    )


def release(lease: HeldLease) -> bool:
    """Give the lease back at once; a no-op (``False``) for a stale token."""
    with connection.cursor() as cursor:
        cursor.execute(_sql(_RELEASE_PG, _RELEASE_SQLITE), {"key": lease.key, "token": lease.token})
        return cursor.rowcount == 1


def force_release(key: str) -> bool:
    """Operator's release of whoever holds ``key``. The holder stays fenced out: the next
    acquisition gets a higher token and the old holder's renewals and fenced writes fail."""
    with connection.cursor() as cursor:
        cursor.execute(_sql(_FORCE_RELEASE_PG, _FORCE_RELEASE_SQLITE), {"key": key})
        return cursor.rowcount == 1


def verify_held(key: str, token: int) -> None:
    """Inside a transaction: raise ``LeaseLost`` unless ``token`` holds a live lease on ``key``,
    and (PostgreSQL) keep any new acquirer waiting until this transaction ends."""
    with connection.cursor() as cursor:
        cursor.execute(_sql(_VERIFY_PG, _VERIFY_SQLITE), {"key": key, "token": token})
        if cursor.fetchone() is None:
            raise LeaseLost(f"lease {key!r} with token {token} is no longer held")
