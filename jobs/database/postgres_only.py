"""Migration steps that exist only on PostgreSQL (triggers, PL/pgSQL functions).

The app needs PostgreSQL (``jobs.checks`` refuses another database at start-up); elsewhere these
steps do nothing, so that a project's own tests on another database still migrate.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

# The frozen, versioned SQL a migration installs (NNNN_what.sql, NNNN: the migration). The
# current text of each function and trigger is jobs/sql/, which later changes: a migration that
# read it would install tomorrow's text in yesterday's schema.
FROZEN_SQL = Path(__file__).parents[1] / "migrations" / "sql"


def run_sql(sql: str) -> Callable[[Any, Any], None]:
    """A ``RunPython`` function that executes ``sql`` (taken as it is: no parameters) on
    PostgreSQL and does nothing elsewhere."""

    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql, params=None)

    return run


def run_frozen_sql(*names: str, first: str = "") -> Callable[[Any, Any], None]:
    """``run_sql`` of ``first`` (say, dropping a function whose result type a file changes) and
    then of the files ``names`` of ``FROZEN_SQL``, in order, read when it runs."""

    def run(apps: Any, schema_editor: Any) -> None:
        files = [(FROZEN_SQL / name).read_text(encoding="utf-8") for name in names]
        run_sql("".join([first, *files]))(apps, schema_editor)

    return run
