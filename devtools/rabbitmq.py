"""A private RabbitMQ node for the test suite, for machines where none answers on 5672.

There is no RabbitMQ wheel, so the node runs the scripts of Debian's ``rabbitmq-server`` package
(``make test`` installs it when missing) with everything of its own: node name, AMQP port,
distribution port, an epmd on a private port, an Erlang cookie, a generated user, and its
config, data and logs in a temporary folder. Nothing from ``/etc/rabbitmq`` or
``/var/lib/rabbitmq`` is read, and every listener is on 127.0.0.1, so it neither sees nor
disturbs a RabbitMQ (or epmd) the machine already runs. It is stopped, and its folder removed,
by the process that started it.

The tests learn about it from two variables: ``JOBS_TEST_AMQP_URL`` (its URL) and
``JOBS_TEST_RABBITMQCTL`` (a script that runs ``rabbitmqctl`` against it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import amqp

log = logging.getLogger("devtools.rabbitmq")

# The package's own scripts. Not /usr/sbin's wrappers: run as root, those `su rabbitmq`, which
# resets HOME (the cookie) and would make the node and rabbitmqctl use the machine's settings.
SCRIPTS_DIR = Path("/usr/lib/rabbitmq/bin")
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
FORCE_VARIABLE = "JOBS_TEST_PRIVATE_RABBITMQ"
LOOPBACK = "127.0.0.1"
START_TIMEOUT = 90.0  # a cold Erlang VM on a small, busy machine
STOP_TIMEOUT = 30.0
USER = "jobs-test"


class NodeProcess:
    """The node's Erlang VM, which a test may kill (SIGKILL, as a crash) and start again on the
    same data folder: durable queues and the persistent messages RabbitMQ confirmed survive."""

    def __init__(self, folder: Path, env: Mapping[str, str], amqp_port: int, password: str):
        self.folder, self.env, self.amqp_port, self.password = folder, env, amqp_port, password
        self.server: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.server = _start_server(self.folder, self.env)
        _wait_for_amqp(self.server, self.folder, self.amqp_port, self.password)

    def kill(self) -> None:
        """Kill the whole VM at once: no clean shutdown, nothing flushed that was not already."""
        if self.server is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.server.pid, signal.SIGKILL)
            self.server.wait()
            self.server = None


@dataclass(frozen=True)
class PrivateNode:
    name: str
    amqp_port: int
    amqp_url: str
    rabbitmqctl: Path  # runs the package's rabbitmqctl against this node
    process: NodeProcess | None = None

    def as_env(self) -> dict[str, str]:
        return {"JOBS_TEST_AMQP_URL": self.amqp_url, "JOBS_TEST_RABBITMQCTL": str(self.rabbitmqctl)}


@contextlib.contextmanager
def rabbitmq_for_tests(environ: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """What the test run adds to its environment for RabbitMQ: nothing when ``JOBS_TEST_AMQP_URL``
    names a server or one answers on 127.0.0.1:5672 (the tests' default), else a private node's
    settings. ``JOBS_TEST_PRIVATE_RABBITMQ=1`` asks for the private node even when 5672 answers."""
    if environ.get("JOBS_TEST_AMQP_URL"):
        yield {}
        return
    forced = environ.get(FORCE_VARIABLE, "") not in ("", "0")
    if not forced and amqp_answers(LOOPBACK, 5672):
        log.info("RabbitMQ answers on 127.0.0.1:5672; the tests use it")
        yield {}
        return
    with private_rabbitmq_node() as node:
        yield node.as_env()


@contextlib.contextmanager
def private_rabbitmq_node() -> Iterator[PrivateNode]:
    """Start a private node, wait until it accepts AMQP logins, and stop it on exit."""
    _require_package()
    folder = Path(tempfile.mkdtemp(prefix="jobs-rabbitmq-"))
    try:
        amqp_port, dist_port, epmd_port = _free_ports(3)
        name = f"jobs-test-{os.getpid()}@localhost"
        password = secrets.token_urlsafe(16)
        env = _node_env(folder, name, dist_port, epmd_port)
        _write_config(folder, amqp_port, password)
        rabbitmqctl = _write_rabbitmqctl(folder, name, env)
        with _process(_start_epmd(folder, epmd_port, env), "epmd"):
            started = time.monotonic()
            process = NodeProcess(folder, env, amqp_port, password)
            try:
                process.start()
                log.info(
                    "private RabbitMQ %s ready in %.1fs on port %d",
                    name, time.monotonic() - started, amqp_port,
                )  # fmt: skip
                url = f"amqp://{USER}:{password}@{LOOPBACK}:{amqp_port}/"
                yield PrivateNode(name, amqp_port, url, rabbitmqctl, process)
            finally:
                if process.server is not None:  # else killed, and not started again
                    _stop(process.server, "RabbitMQ")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def amqp_answers(host: str, port: int) -> bool:
    """Whether an AMQP 0-9-1 server answers there: it replies to the protocol header with a
    method frame (Connection.Start). No login, so it needs no credentials."""
    try:
        with socket.create_connection((host, port), timeout=1.0) as conn:
            conn.sendall(b"AMQP\x00\x00\x09\x01")
            return conn.recv(1) == b"\x01"
    except OSError:
        return False


def _require_package() -> None:
    if not (SCRIPTS_DIR / "rabbitmq-server").exists() or shutil.which("epmd") is None:
        raise RuntimeError(
            "no RabbitMQ answers on 127.0.0.1:5672 and the rabbitmq-server package is missing, "
            "so no private node can be started: `make test` installs it (apt-get install "
            "rabbitmq-server), or point JOBS_TEST_AMQP_URL at a RabbitMQ"
        )


def _node_env(folder: Path, name: str, dist_port: int, epmd_port: int) -> dict[str, str]:
    """The variables the server and its rabbitmqctl share: every path under ``folder``, so no
    file of the machine's RabbitMQ (config, env file, plugins list, cookie) is read."""
    home = folder / "home"
    home.mkdir()
    cookie = home / ".erlang.cookie"
    cookie.write_text(secrets.token_hex(20))
    cookie.chmod(0o400)  # Erlang refuses a cookie others can read
    (folder / "conf.d").mkdir()
    (folder / "enabled_plugins").write_text("[].\n")  # no management plugin on 15672
    (folder / "rabbitmq-env.conf").write_text("")
    return {
        **os.environ,
        "HOME": str(home),
        "RABBITMQ_NODENAME": name,
        "RABBITMQ_DIST_PORT": str(dist_port),
        "RABBITMQ_BASE": str(folder),
        "RABBITMQ_CONF_ENV_FILE": str(folder / "rabbitmq-env.conf"),
        "RABBITMQ_CONFIG_FILE": str(folder / "rabbitmq.conf"),
        "RABBITMQ_CONFIG_FILES": str(folder / "conf.d"),
        "RABBITMQ_ADVANCED_CONFIG_FILE": str(folder / "advanced.config"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(folder / "enabled_plugins"),
        "RABBITMQ_MNESIA_BASE": str(folder / "mnesia"),
        "RABBITMQ_LOG_BASE": str(folder / "log"),
        "RABBITMQ_PID_FILE": str(folder / "node.pid"),
        # The Erlang distribution (server and rabbitmqctl) on loopback, through our own epmd;
        # -start_epmd false: should ours be gone, fail rather than start a stray one.
        "ERL_EPMD_ADDRESS": LOOPBACK,
        "ERL_EPMD_PORT": str(epmd_port),
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        "RABBITMQ_SERVER_START_ARGS": "-start_epmd false",
        "ERL_FLAGS": "-kernel inet_dist_use_interface {127,0,0,1}",
    }


def _write_config(folder: Path, amqp_port: int, password: str) -> None:
    (folder / "rabbitmq.conf").write_text(
        f"listeners.tcp.1 = {LOOPBACK}:{amqp_port}\n"
        f"default_user = {USER}\n"
        f"default_pass = {password}\n"
        "log.console = false\n"
        "log.file.level = info\n"
    )


def _write_rabbitmqctl(folder: Path, name: str, env: Mapping[str, str]) -> Path:
    """A ``rabbitmqctl`` for this node alone: the tests (and a curious human) run it as is."""
    shared = {k: v for k, v in env.items() if k.startswith(("RABBITMQ_", "ERL_")) or k == "HOME"}
    exports = "".join(f"export {key}={shlex.quote(value)}\n" for key, value in shared.items())
    script = folder / "rabbitmqctl"
    script.write_text(
        f"#!/bin/sh\n# rabbitmqctl for the private test node {name} (devtools/rabbitmq.py)\n"
        f'{exports}exec {shlex.quote(str(SCRIPTS_DIR / "rabbitmqctl"))} -n {name} "$@"\n'
    )
    script.chmod(0o700)
    return script


def _start_epmd(folder: Path, port: int, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    # In the foreground (no -daemon), so it is our child and we stop exactly this one.
    with (folder / "epmd.log").open("wb") as out:
        epmd = subprocess.Popen(
            ["epmd", "-port", str(port), "-address", LOOPBACK],
            env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    _wait_until(lambda: _port_open(port), epmd, f"epmd listening on {port}", folder / "epmd.log")
    return epmd


def _start_server(folder: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    with (folder / "server.log").open("wb") as out:
        return subprocess.Popen(
            [str(SCRIPTS_DIR / "rabbitmq-server")],
            env=env, cwd=folder, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the VM and its helpers stop with it
        )  # fmt: skip


def _wait_for_amqp(server: subprocess.Popen[bytes], folder: Path, port: int, password: str) -> None:
    def logs_in() -> bool:
        try:
            conn = amqp.Connection(
                f"{LOOPBACK}:{port}", userid=USER, password=password, connect_timeout=1
            )
            conn.connect()
            conn.close()
        except Exception:
            return False
        return True

    _wait_until(logs_in, server, f"RabbitMQ login on port {port}", folder / "server.log")


def _wait_until(
    ready: Callable[[], bool], process: subprocess.Popen[bytes], what: str, logfile: Path
) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while not ready():
        if process.poll() is not None:
            raise RuntimeError(f"{what}: exited with {process.returncode}\n{_tail(logfile)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {what} after {START_TIMEOUT}s\n{_tail(logfile)}")
        time.sleep(0.1)


@contextlib.contextmanager
def _process(process: subprocess.Popen[bytes], what: str) -> Iterator[None]:
    """Stop ``process`` on exit (``_stop``)."""
    try:
        yield
    finally:
        _stop(process, what)


def _stop(process: subprocess.Popen[bytes], what: str) -> None:
    """SIGTERM (RabbitMQ's script stops the node gracefully), then the whole process group, so
    no VM helper (erl_child_setup, inet_gethost) outlives it."""
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        log.warning("%s did not stop in %.0fs; killing it", what, STOP_TIMEOUT)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _tail(logfile: Path, lines: int = 30) -> str:
    try:
        return "\n".join(logfile.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no {logfile.name})"


def _port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), timeout=0.5):
        return True
    return False


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on loopback (all probes held open until each is known)."""
    with contextlib.ExitStack() as stack:
        probes = [stack.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind((LOOPBACK, 0))
        return [int(probe.getsockname()[1]) for probe in probes]
