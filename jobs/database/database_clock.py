"""The database's clock: the one clock by which leases, deadlines, liveness and ages are judged,
so that no node's clock can change an outcome."""

from __future__ import annotations

from datetime import datetime

from django.db import connection
from django.db.models import DurationField, ExpressionWrapper, F
from django.db.models.functions import Now


def database_now() -> datetime:
    """PostgreSQL's ``now()``: one round trip."""
    return _select("now()")


def database_instant() -> datetime:
    """PostgreSQL's clock at this instant (``clock_timestamp()``): one round trip. Unlike ``now()``
    it is not the start of an enclosing transaction, so a clock measured inside one is not stale."""
    return _select("clock_timestamp()")


def _select(function: str) -> datetime:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}")
        row = cursor.fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


def age_of(field: str) -> ExpressionWrapper:
    """How long ago the time in column ``field`` was, by the database's clock (an annotation)."""
    return ExpressionWrapper(Now() - F(field), output_field=DurationField())
