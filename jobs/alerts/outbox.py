"""The outbox's statements: take the notifications due, record what their delivery did.

Taking a row counts an attempt and hides the row for ``claim_for`` seconds (longer than a
delivery may take), so a sender that dies mid-delivery leaves it to be retried then: nothing is
lost, and at worst a notification arrives twice with the same idempotency key.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection

# Exponential backoff between attempts of one row: 1 s, 2 s, 4 s ... at most 5 min (±10 %),
# given up a day after the row was written (state 'failed', kept with its last error).
BACKOFF_BASE = 1.0
BACKOFF_CAP = 300.0
GIVE_UP_AFTER = timedelta(days=1)


@dataclass(frozen=True)
class Due:
    delivery_id: int
    incident_id: int
    event: str
    channel: str
    attempts: int  # including this one
    created_at: datetime


# Oldest first; a row waits while an earlier row of its incident and channel is pending, so
# an incident's resolution never arrives before its opening.
_TAKE_DUE = """
UPDATE jobs_alertdelivery AS d
   SET attempts = d.attempts + 1, next_attempt_at = now() + make_interval(secs => %(claim_for)s)
 WHERE d.id IN (
        SELECT p.id FROM jobs_alertdelivery AS p
         WHERE p.state = 'pending' AND p.next_attempt_at <= now()
           AND NOT EXISTS (SELECT 1 FROM jobs_alertdelivery AS e
                            WHERE e.incident_id = p.incident_id AND e.channel = p.channel
                              AND e.state = 'pending' AND e.id < p.id)
         ORDER BY p.next_attempt_at, p.id
         LIMIT %(limit)s
           FOR UPDATE OF p SKIP LOCKED)
RETURNING d.id, d.incident_id, d.event, d.channel, d.attempts, d.created_at
"""

_ANY_DUE = """
SELECT EXISTS (SELECT 1 FROM jobs_alertdelivery
                WHERE state = 'pending' AND next_attempt_at <= now())
"""

_DELIVERED = """
UPDATE jobs_alertdelivery SET state = 'delivered', delivered_at = now(), last_error = ''
 WHERE id = %(id)s AND state = 'pending'
"""

_DROPPED = """
UPDATE jobs_alertdelivery SET state = 'dropped', last_error = %(error)s
 WHERE id = %(id)s AND state = 'pending'
"""

_RETRY_LATER = """
UPDATE jobs_alertdelivery
   SET last_error = %(error)s, next_attempt_at = now() + make_interval(secs => %(delay)s),
       state = CASE WHEN now() - created_at > %(give_up)s THEN 'failed' ELSE 'pending' END
 WHERE id = %(id)s AND state = 'pending'
RETURNING state
"""


def any_due() -> bool:
    """One indexed probe: is any notification waiting to be sent?"""
    with connection.cursor() as cursor:
        cursor.execute(_ANY_DUE)
        return bool(cursor.fetchone()[0])


def take_due(limit: int, claim_for: float) -> list[Due]:
    with connection.cursor() as cursor:
        cursor.execute(_TAKE_DUE, {"limit": limit, "claim_for": claim_for})
        return [Due(*row) for row in cursor.fetchall()]


def mark_delivered(delivery_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_DELIVERED, {"id": delivery_id})


def mark_dropped(delivery_id: int, error: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_DROPPED, {"id": delivery_id, "error": error})


def retry_later(delivery_id: int, attempts: int, error: str) -> str | None:
    """Record a failed attempt; the row's state after it (``failed`` once given up)."""
    params: dict[str, Any] = {
        "id": delivery_id,
        "error": error[:2000],
        "delay": backoff(attempts),
        "give_up": GIVE_UP_AFTER,
    }
    with connection.cursor() as cursor:
        cursor.execute(_RETRY_LATER, params)
        row = cursor.fetchone()
    return None if row is None else str(row[0])


def backoff(attempts: int) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones."""
    delay = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** max(0, attempts - 1))
    return delay * random.uniform(0.9, 1.1)
