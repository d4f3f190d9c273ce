"""Migration steps that exist only on PostgreSQL (triggers, PL/pgSQL functions).

The scheduler and the runner need PostgreSQL; the lease contract suite also migrates a SQLite
database, where the tables exist but nothing calls these.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def run_sql(sql: str) -> Callable[[Any, Any], None]:
    """A ``RunPython`` function that executes ``sql`` (taken as it is: no parameters) on
    PostgreSQL and does nothing elsewhere."""

    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql, params=None)

    return run
