"""Pages over a table of millions of runs: counting every row is what makes them slow."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.core.paginator import Paginator
from django.db import connections

# Below this many rows an exact count is cheap, and an estimate could be visibly off.
ESTIMATE_ABOVE = 100_000

_ESTIMATE = "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass"


def estimated_rows(table: str, using: str = "default") -> int | None:
    """PostgreSQL's own estimate of ``table``'s rows (kept by autovacuum's ANALYZE), or ``None``
    when it has none or the database is another."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(_ESTIMATE, [table])
        row = cursor.fetchone()
    return None if row is None or row[0] is None or row[0] < 0 else int(row[0])


class EstimatedCountPaginator(Paginator):
    """An unfiltered list of a large table counts by PostgreSQL's estimate instead of a
    ``COUNT(*)`` over every row; a filtered one counts exactly. ``estimated`` says which."""

    estimated = False

    @cached_property
    def count(self) -> int:
        rows: Any = self.object_list
        query = getattr(rows, "query", None)
        if query is not None and not query.where:
            estimate = estimated_rows(query.model._meta.db_table, rows.db)
            if estimate is not None and estimate > ESTIMATE_ABOVE:
                self.estimated = True
                return estimate
        return int(super().count)
