"""A private PgBouncer in transaction pooling for the tests, in front of the suite's PostgreSQL.

It runs Debian's ``pgbouncer`` package (``make test`` installs it when missing) with its own
config in a temporary folder, listening on a free port of 127.0.0.1 only. Transaction pooling
with ``max_prepared_statements`` unset (1.18 has none) is what users run and what breaks
session state: a statement prepared on one server connection is unknown on the next.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from devtools.services import free_port

BINARY = "/usr/sbin/pgbouncer"
# PgBouncer refuses to run as root; started as root it switches to this user (the Debian
# package depends on postgresql-common, which creates it), unless the server listens on a socket
# folder only its own account may enter (the embedded pgserver's, mode 0700): then to that account.
RUN_AS = "postgres"
START_TIMEOUT = 20.0


@dataclass(frozen=True)
class Pooler:
    port: int
    url: str  # the database URL, through the pooler


@contextlib.contextmanager
def transaction_pooler(database_url: str) -> Iterator[Pooler]:
    """A PgBouncer in transaction mode for the database at ``database_url`` (any user, as the
    server would authenticate it), stopped and its folder removed on exit."""
    if not os.access(BINARY, os.X_OK):
        raise RuntimeError(f"{BINARY} is missing: `make test` installs Debian's pgbouncer")
    target = urlsplit(database_url)
    folder = Path(tempfile.mkdtemp(prefix="jobs-pgbouncer-"))
    port = free_port()
    host, server_port = _server_address(target.netloc)
    run_as = _run_as(host) if os.geteuid() == 0 else None
    _write_config(
        folder,
        port,
        host=host,
        server_port=server_port,
        user=unquote(target.username or RUN_AS),
        run_as=run_as,
    )
    if run_as is not None:
        account = pwd.getpwnam(run_as)
        os.chown(folder, account.pw_uid, account.pw_gid)
    log = (folder / "pgbouncer.log").open("wb")
    process = subprocess.Popen(
        [BINARY, str(folder / "pgbouncer.ini")], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        _wait_for_port(process, folder, port)
        auth = f"{target.username}@" if target.username else ""
        url = f"postgresql://{auth}127.0.0.1:{port}{target.path}"
        if target.query:
            url += f"?{target.query}"
        yield Pooler(port=port, url=url)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


def _server_address(netloc: str) -> tuple[str, int | None]:
    """Host and port of a URL's netloc; not ``urlsplit().hostname``, which lowercases, and the
    embedded server's host is a socket folder."""
    address = netloc.rpartition("@")[2]
    host, colon, port = address.rpartition(":")
    if colon and port.isdigit():
        return unquote(host), int(port)
    return unquote(address), None


def _run_as(host: str) -> str:
    """The account a root-started PgBouncer switches to: the owner of a socket folder that is
    not root's (so it can enter it), else ``RUN_AS``."""
    if host.startswith("/"):
        with contextlib.suppress(OSError, KeyError):
            owner = os.stat(host).st_uid
            if owner != 0:
                return pwd.getpwuid(owner).pw_name
    return RUN_AS


def _write_config(
    folder: Path,
    port: int,
    *,
    host: str,
    server_port: int | None,
    user: str,
    run_as: str | None,
) -> None:
    # auth_type=any logs every client in as the URL's user; the server checks that user.
    server = f"host={host or '127.0.0.1'} port={server_port or 5432} user={user}"
    lines = [
        "[databases]",
        f"* = {server}",
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        f"listen_port = {port}",
        "unix_socket_dir =",
        "auth_type = any",
        "pool_mode = transaction",
        "max_client_conn = 500",
        "default_pool_size = 40",
        "ignore_startup_parameters = extra_float_digits,options",
        f"user = {run_as}" if run_as is not None else "",
    ]
    (folder / "pgbouncer.ini").write_text("\n".join(lines) + "\n")


def _wait_for_port(process: subprocess.Popen[bytes], folder: Path, port: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = (folder / "pgbouncer.log").read_text(errors="replace")
            raise RuntimeError(f"pgbouncer exited with {process.returncode}:\n{log}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"pgbouncer did not listen on 127.0.0.1:{port} in {START_TIMEOUT:.0f} s")
