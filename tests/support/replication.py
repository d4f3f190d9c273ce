"""A PostgreSQL primary and a streaming standby of a test's own, and a movable address for them.

Debian's server binaries (``/usr/lib/postgresql/<version>/bin``: ``initdb``, ``pg_ctl``,
``pg_basebackup``) run two servers on free ports of 127.0.0.1 (no Unix socket, trust
authentication: loopback only, for tests). The standby streams from the primary through a
``Relay`` (the replication link), which the test can cut to make the standby fall behind; the
processes under test reach the database through another ``Relay``, moved to the standby once it
is promoted, as a virtual IP or a DNS name is moved in production.

Started as root (containers, CI), the servers run as the ``postgres`` account, which Debian's
package creates: PostgreSQL refuses to run as root. Their folders are then made with
``tempfile`` rather than under pytest's ``tmp_path``, whose root only root may enter.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.support.tcp_proxy import TcpProxy, shut

BINARIES_GLOB = "/usr/lib/postgresql/*/bin"
RUN_AS = "postgres"
START_TIMEOUT = 60


class ReplicationUnavailable(RuntimeError):
    """The binaries or the account the servers need are missing."""


def server_binaries() -> Path:
    """The newest installed PostgreSQL's ``bin`` folder that has every tool the pair needs."""
    found = [
        Path(folder)
        for folder in glob.glob(BINARIES_GLOB)
        if all(os.access(Path(folder) / tool, os.X_OK) for tool in _TOOLS)
    ]
    if not found:
        raise ReplicationUnavailable(
            f"no PostgreSQL server binaries ({', '.join(_TOOLS)}) under {BINARIES_GLOB}: "
            "install Debian's postgresql package (apt-get install postgresql)"
        )
    return max(found, key=lambda folder: int(folder.parent.name.split(".")[0]))


_TOOLS = ("initdb", "pg_ctl", "pg_basebackup", "postgres")


class Relay(TcpProxy):
    """A TCP relay on a free port of 127.0.0.1 to ``127.0.0.1:<target>``; ``point_at`` moves it
    (cutting every connection it carries), ``point_at(None)`` refuses every connection."""

    def __init__(self, target: int | None) -> None:
        self._target = target
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        super().__init__()

    def point_at(self, target: int | None) -> None:
        with self._lock:
            self._target = target
            cut, self._open = self._open, set()
        for sock in cut:
            shut(sock)

    def close(self) -> None:
        super().close()
        self.point_at(None)

    def _connect(self, client: socket.socket) -> socket.socket:
        with self._lock:
            target = self._target
        if target is None:
            raise OSError("refused")
        server = socket.create_connection(("127.0.0.1", target), timeout=5)
        server.settimeout(None)
        with self._lock:
            if self._target != target:  # moved meanwhile
                shut(server)
                raise OSError("moved")
            self._open.update((client, server))
        return server

    def _carry(self, client: socket.socket, server: socket.socket) -> None:
        for source, sink in ((client, server), (server, client)):
            threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        while True:
            try:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
            except OSError:
                break
        with self._lock:
            self._open.discard(source)
            self._open.discard(sink)
        shut(source)
        shut(sink)


@dataclass
class Server:
    name: str
    data: Path
    port: int
    bin: Path
    run_as: str | None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.data.parent / f"{self.name}.log"

    def run(self, tool: str, *args: str) -> None:
        done = subprocess.run(
            [str(self.bin / tool), *args],
            user=self.run_as,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT,
            cwd=self.data.parent,
        )
        if done.returncode != 0:
            log = self.log.read_text(errors="replace") if self.log.exists() else ""
            raise RuntimeError(f"{tool} {' '.join(args)} failed:\n{done.stdout}{done.stderr}{log}")

    def pg_ctl(self, *args: str) -> None:
        self.run("pg_ctl", "-D", str(self.data), *args)

    def start(self) -> None:
        self.pg_ctl("-w", "-t", str(START_TIMEOUT), "-l", str(self.log), "start")

    def kill(self) -> None:
        """As a crash: every server process ends at once, nothing is flushed or shut down."""
        self.pg_ctl("-m", "immediate", "stop")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def query(self, statement: str, params: Any = None, database: str = "postgres") -> list[Any]:
        with psycopg.connect(self.url(database), autocommit=True, connect_timeout=5) as conn:
            cursor = conn.execute(statement, params)
            return cursor.fetchall() if cursor.description else []

    def configure(self, **settings: str | int) -> None:
        with (self.data / "postgresql.conf").open("a") as conf:
            for name, value in settings.items():
                quoted = f"'{value}'" if isinstance(value, str) else str(value)
                conf.write(f"{name} = {quoted}\n")


@dataclass
class ReplicatedPostgres:
    """A primary, a standby streaming from it through ``link``, and ``address``: the relay the
    processes under test connect to (the primary, then whichever server the test points it at)."""

    primary: Server
    standby: Server
    link: Relay
    address: Relay
    synchronous: bool
    database: str = "jobs"

    @property
    def url(self) -> str:
        """The database URL through ``address``."""
        return f"postgresql://postgres@127.0.0.1:{self.address.port}/{self.database}"

    def wait_streaming(self, timeout: float = START_TIMEOUT) -> None:
        """Until the standby streams from the primary (as a synchronous standby, if asked)."""
        wanted = "sync" if self.synchronous else "async"
        deadline = time.monotonic() + timeout
        while True:
            rows = self.primary.query(
                "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby'"
                " AND state = 'streaming'"
            )
            if rows and rows[0][0] == wanted:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby is not streaming ({wanted}) after {timeout} s")
            time.sleep(0.1)

    def wait_caught_up(self, timeout: float = 30) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        (lsn,) = self.primary.query("SELECT pg_current_wal_lsn()::text")[0]
        deadline = time.monotonic() + timeout
        while not self.standby.query("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [lsn])[0][0]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby did not replay up to {lsn} in {timeout} s")
            time.sleep(0.1)

    def cut_replication(self) -> None:
        """The standby stops receiving WAL (its walreceiver's connection is cut and every new
        one refused); the primary goes on committing, as an asynchronous primary does."""
        self.link.point_at(None)

    def fail_over(self) -> None:
        """The primary crashes, the standby is promoted, the address moves to it."""
        self.address.point_at(None)
        self.primary.kill()
        self.standby.pg_ctl("-w", "-t", str(START_TIMEOUT), "promote")
        self.address.point_at(self.standby.port)


@contextlib.contextmanager
def replicated_postgres(*, synchronous: bool) -> Iterator[ReplicatedPostgres]:
    """A running primary with database ``jobs`` and a standby streaming from it, synchronously
    (``synchronous_standby_names`` naming it, ``synchronous_commit = on``) or not. Everything
    is stopped and removed on exit."""
    bin_dir = server_binaries()
    run_as = None
    if os.geteuid() == 0:
        try:
            account = pwd.getpwnam(RUN_AS)
        except KeyError as exc:
            raise ReplicationUnavailable(
                f"PostgreSQL refuses to run as root and there is no {RUN_AS!r} account"
            ) from exc
        run_as = RUN_AS
    folder = Path(tempfile.mkdtemp(prefix="jobs-failover-"))
    if run_as is not None:
        os.chown(folder, account.pw_uid, account.pw_gid)
    primary = Server("primary", folder / "primary", _free_port(), bin_dir, run_as)
    standby = Server("standby", folder / "standby", _free_port(), bin_dir, run_as)
    link = Relay(primary.port)
    address = Relay(primary.port)
    started: list[Server] = []
    try:
        primary.run(
            "initdb", "-D", str(primary.data), "-U", "postgres", "--auth=trust",
            "--no-sync", "--no-instructions", "-E", "UTF8", "--locale=C",
        )  # fmt: skip
        primary.configure(
            port=primary.port,
            listen_addresses="127.0.0.1",
            unix_socket_directories="",
            wal_level="replica",
            max_wal_senders=4,
            max_connections=100,
            shared_buffers="32MB",
            fsync="off",  # nothing here survives a machine crash anyway; a process kill is fine
            synchronous_commit="on",
            wal_receiver_status_interval="1s",
            wal_retrieve_retry_interval="200ms",
            log_line_prefix="%m [%p] ",
        )
        primary.start()
        started.append(primary)
        primary.query("CREATE DATABASE jobs")
        # The standby copies the primary's files and configuration, then its own port and name
        # (its walreceiver's application_name, which synchronous_standby_names names).
        primary.run(
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(link.port), "-U", "postgres",
            "-D", str(standby.data), "-R", "-X", "stream", "-c", "fast", "--no-sync",
        )  # fmt: skip
        standby.configure(port=standby.port, cluster_name="standby", hot_standby="on")
        standby.start()
        started.append(standby)
        if synchronous:
            primary.query("ALTER SYSTEM SET synchronous_standby_names = 'standby'")
            primary.query("SELECT pg_reload_conf()")
        pair = ReplicatedPostgres(primary, standby, link, address, synchronous)
        pair.wait_streaming()
        yield pair
    finally:
        address.close()
        link.close()
        for server in reversed(started):
            with contextlib.suppress(Exception):
                server.kill()
        shutil.rmtree(folder, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
