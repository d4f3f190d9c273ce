"""A PostgreSQL server of a test's own (the pgserver wheel, on a unix socket), to stop and start,
or to fill, as the suite's shared server never may be."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from devtools.services import import_pgserver


@dataclass
class PrivatePostgres:
    server: Any
    url: str

    def pg_ctl(self, *args: str) -> None:
        from pgserver._commands import pg_ctl  # type: ignore[attr-defined]

        pg_ctl(list(args), pgdata=self.server.pgdata, user=self.server.system_user, timeout=60)

    def stop(self) -> None:
        self.pg_ctl("-w", "-m", "fast", "stop")

    def start(self) -> None:
        socket_dir = self.server.get_postmaster_info().socket_dir
        self.pg_ctl(
            "-w", "-o", '-h ""', "-o", f"-k {socket_dir}", "-l", str(self.server.log), "start"
        )
        self.server.ensure_postgres_running()  # so that cleanup stops this server


@contextlib.contextmanager
def private_postgres_server(prefix: str, *setup: str) -> Iterator[PrivatePostgres]:
    """A running server with a ``jobs`` database, after the ``setup`` statements; removed after."""
    pgserver = import_pgserver()
    # Not under pytest's tmp_path: the server runs as another user, and every pytest start
    # makes pytest's temporary root private again.
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    server = pgserver.get_server(folder / "pg", cleanup_mode="delete")
    try:
        server.psql("CREATE DATABASE jobs;")
        for statement in setup:
            server.psql(statement)
        socket_dir = str(server.get_postmaster_info().socket_dir)
        yield PrivatePostgres(server, f"postgresql://postgres@{quote(socket_dir, safe='')}/jobs")
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)
