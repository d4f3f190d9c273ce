"""The database taken back to an earlier migration, for a test of what a later one does to the
rows it finds; migrated forward to the newest again afterwards, whatever the test did."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection
from django.db.migrations.executor import MigrationExecutor


@contextmanager
def migrated_back_to(target: tuple[str, str]) -> Iterator[MigrationExecutor]:
    executor = MigrationExecutor(connection)
    executor.migrate([target])
    try:
        yield executor
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
