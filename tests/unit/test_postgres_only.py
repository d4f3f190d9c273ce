"""Migration steps that exist only on PostgreSQL (jobs.database.postgres_only): run there, as given
and without parameters, and skipped on another database; the frozen files read when they run."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jobs.database import postgres_only
from jobs.database.postgres_only import FROZEN_SQL, run_frozen_sql, run_sql


class SchemaEditor:
    def __init__(self, vendor: str) -> None:
        self.connection = SimpleNamespace(vendor=vendor)
        self.executed: list[tuple[str, Any]] = []

    def execute(self, sql: str, params: Any = ()) -> None:
        self.executed.append((sql, params))


def test_sql_runs_on_postgresql_only_and_as_given() -> None:
    step = run_sql("SELECT '%s'")
    postgres, sqlite = SchemaEditor("postgresql"), SchemaEditor("sqlite")
    step(None, postgres)
    step(None, sqlite)
    assert postgres.executed == [("SELECT '%s'", None)]  # no parameters: a % stays a %
    assert sqlite.executed == []


def test_frozen_files_run_after_the_first_statement_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "0001_a.sql").write_text("CREATE a;\n", encoding="utf-8")
    (tmp_path / "0002_b.sql").write_text("CREATE b;\n", encoding="utf-8")
    monkeypatch.setattr(postgres_only, "FROZEN_SQL", tmp_path)
    step = run_frozen_sql("0002_b.sql", "0001_a.sql", first="DROP x;\n")
    editor = SchemaEditor("postgresql")
    step(None, editor)
    assert editor.executed == [("DROP x;\nCREATE b;\nCREATE a;\n", None)]


def test_the_frozen_files_are_the_migrations_own() -> None:
    assert Path(postgres_only.__file__).parents[1] / "migrations" / "sql" == FROZEN_SQL
    assert any(FROZEN_SQL.glob("0*.sql"))
