"""The database contract in one home: a migrated database holds exactly the functions and
triggers of ``jobs/sql/``, no more and no fewer, each as written there.

Compared as PostgreSQL prints them (``pg_get_functiondef``, ``pg_get_triggerdef``): the live
objects against jobs/sql's text installed beside them in a scratch schema, in this test's
transaction, which is rolled back. A function body is kept verbatim, so one changed character
(a comment included) is a difference."""

from __future__ import annotations

import difflib
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from jobs.database import postgres_only

pytestmark = pytest.mark.django_db

SQL = Path(postgres_only.__file__).parents[1] / "sql"
MIGRATIONS = Path(postgres_only.__file__).parents[1] / "migrations"
SCRATCH = "jobs_sql_contract"

# Objects by name (a function with its argument types; a trigger with its table), each printed
# with its schema left out, so the live and the scratch copy print alike.
_FUNCTIONS = """
SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
       pg_get_functiondef(p.oid)
  FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
 WHERE n.nspname = %(schema)s
   AND NOT EXISTS (SELECT 1 FROM pg_depend AS d WHERE d.objid = p.oid AND d.deptype = 'e')
"""
_TRIGGERS = """
SELECT c.relname || '.' || t.tgname, pg_get_triggerdef(t.oid)
  FROM pg_trigger AS t JOIN pg_class AS c ON c.oid = t.tgrelid
  JOIN pg_namespace AS n ON n.oid = c.relnamespace
 WHERE n.nspname = %(schema)s AND NOT t.tgisinternal
"""


def _definitions(cursor: Any, schema: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for query in (_FUNCTIONS, _TRIGGERS):
        cursor.execute(query, {"schema": schema})
        for name, definition in cursor.fetchall():
            # The schema appears only where the function or the trigger's table is named.
            found[name] = definition.replace(f" {schema}.", " ")
    return found


def _installed_from_jobs_sql(cursor: Any) -> dict[str, str]:
    """jobs/sql's text, installed in a scratch schema that comes first on the search path and
    holds an empty copy of each table, so its triggers attach there and not to the live ones."""
    cursor.execute(f"CREATE SCHEMA {SCRATCH}")
    cursor.execute(
        "SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'public' AND c.relkind = 'r'"
    )
    for (table,) in cursor.fetchall():
        cursor.execute(f'CREATE TABLE {SCRATCH}."{table}" (LIKE public."{table}")')
    cursor.execute(f"SET LOCAL search_path = {SCRATCH}, public")
    for path in sorted(SQL.glob("*.sql")):
        cursor.execute(path.read_text(encoding="utf-8"))
    return _definitions(cursor, SCRATCH)


def test_the_migrated_database_holds_exactly_the_functions_and_triggers_of_jobs_sql() -> None:
    with connection.cursor() as cursor:
        live = _definitions(cursor, "public")
        written = _installed_from_jobs_sql(cursor)
    assert live, "no function or trigger found: is the test database migrated?"
    assert (sorted(live.keys() - written.keys()), sorted(written.keys() - live.keys())) == (
        [],
        [],
    ), "(migrated, not in jobs/sql/), (in jobs/sql/, not migrated)"
    differing = {name for name in live if live[name] != written[name]}
    diffs = [
        "".join(
            difflib.unified_diff(
                f"{live[name]}\n".splitlines(keepends=True),
                f"{written[name]}\n".splitlines(keepends=True),
                f"{name} as migrated",
                f"{name} in jobs/sql",
            )
        )
        for name in sorted(differing)
    ]
    assert not differing, (
        "jobs/sql/ and the migrated database differ; a change to jobs/sql/ needs a migration "
        "that runs a frozen copy of it (jobs/sql/README.md)\n" + "\n".join(diffs)
    )


def test_each_function_is_written_once_in_jobs_sql() -> None:
    created = Counter(
        name
        for path in SQL.glob("*.sql")
        for name in re.findall(
            r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(\w+)", path.read_text(encoding="utf-8")
        )
    )
    assert created and all(count == 1 for count in created.values()), created


def test_no_migration_imports_another_and_each_frozen_file_is_run() -> None:
    """A migration installs frozen text: never an earlier migration's, patched."""
    sources = {path.name: path.read_text(encoding="utf-8") for path in MIGRATIONS.glob("0*.py")}
    importing = [
        name
        for name, source in sources.items()
        if "importlib" in source or re.search(r"from jobs\.migrations|jobs\.migrations\.0", source)
    ]
    assert not importing
    frozen = sorted(path.name for path in (MIGRATIONS / "sql").glob("*.sql"))
    run = "\n".join(sources.values())
    assert frozen and [name for name in frozen if f'"{name}"' not in run] == []
