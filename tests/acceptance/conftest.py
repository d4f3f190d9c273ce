"""Real ``celery worker`` / ``celery beat`` subprocesses against the test database.

Each test gets its own queue, so workers never see another test's (or a dev platform's)
messages, and every process is stopped (its whole process group) before the database is flushed.

The processes use the suite's broker (``CELERY_BROKER_URL``, Redis) unless a test moves them with
``Cluster.use_broker``; the ``broker`` fixture runs a test once on Redis and once on RabbitMQ (its
own virtual host; ``JOBS_TEST_AMQP_URL`` points elsewhere than the local server, default
``amqp://guest:guest@127.0.0.1:5672/``). When no RabbitMQ answers there, ``make test`` (devtools)
starts a private node and sets ``JOBS_TEST_AMQP_URL`` and ``JOBS_TEST_RABBITMQCTL`` (a
``rabbitmqctl`` that targets it). An unreachable RabbitMQ fails those tests: no skip.

``make test`` runs these scenarios side by side in several pytest processes; each process has a
database and a Redis broker database of its own (``tests/side_by_side.py``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis
from celery import current_app
from django.conf import settings
from kombu import Connection

from devtools.pgbouncer import Pooler, transaction_pooler
from tests.support.private_postgres import PrivatePostgres, private_postgres_server
from tests.support.private_redis import PrivateRedis

ROOT = Path(__file__).resolve().parents[2]
STOP_GRACE_SECONDS = 15
AMQP_BASE = os.environ.get("JOBS_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
# The command that administers that RabbitMQ: the machine's own, or devtools' script for its
# private node (the node has its own name, cookie and epmd port, which plain rabbitmqctl lacks).
RABBITMQCTL = os.environ.get("JOBS_TEST_RABBITMQCTL", "rabbitmqctl")


def live_database_url() -> str:
    """The URL of the database the tests use (pytest-django's ``test_…`` copy)."""
    db = settings.DATABASES["default"]
    host = db.get("HOST") or db.get("OPTIONS", {}).get("host") or ""
    auth = quote(db.get("USER") or "", safe="")
    if db.get("PASSWORD"):
        auth += ":" + quote(db["PASSWORD"], safe="")
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgresql://{auth}@{quote(host, safe='')}{port}/{db['NAME']}"


@dataclass
class Cluster:
    """Processes of one test; everything they print goes to files under ``logs``."""

    env: dict[str, str]
    queue: str
    logs: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def use_broker(self, url: str) -> None:
        """Every process started from now on uses the broker at ``url``."""
        assert not self.processes, "use_broker before starting any process"
        self.env["CELERY_BROKER_URL"] = url

    def use_pooler(self, pooler: Pooler) -> None:
        """Every process started from now on reaches PostgreSQL through ``pooler`` (PgBouncer in
        transaction pooling), configured as the README says."""
        assert not self.processes, "use_pooler before starting any process"
        self.env.update(DATABASE_URL=pooler.url, DATABASE_POOLER="transaction")

    def start_worker(
        self,
        name: str,
        concurrency: int = 2,
        env: Mapping[str, str] | None = None,
        pool: str = "prefork",
    ) -> subprocess.Popen[bytes]:
        argv = [
            sys.executable, "-m", "celery", "-A", "project", "worker",
            "-n", f"{name}@%h", "-Q", self.queue, "-c", str(concurrency), "-P", pool,
            "-l", "info", "--without-gossip", "--without-mingle",
        ]  # fmt: skip
        return self._start(name, argv, env)

    def start_beat(
        self, name: str, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """A ``celery beat``; ``env`` adds variables for this process only."""
        return self._start(
            name, [sys.executable, "-m", "celery", "-A", "project", "beat", "-l", "info"], env
        )

    def start_flower(
        self, name: str, port: int, options: Sequence[str], env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        argv = [
            sys.executable, "-m", "celery", "-A", "project", "flower",
            f"--port={port}", "--address=127.0.0.1", *options,
        ]  # fmt: skip
        return self._start(name, argv, env)

    def manage(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *args],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def kill(self, name: str, signum: int = signal.SIGKILL) -> None:
        _signal_group(self.processes[name], signum)

    def stop_all(self) -> None:
        for process in self.processes.values():
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.1, deadline - time.monotonic()))
            _signal_group(process, signal.SIGKILL)
            process.wait()

    def log_of(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def wait_ready(self, *names: str, timeout: float) -> None:
        """Until each named process started: a worker ``ready``, a beat with its schedule loaded
        (a name starting ``worker`` is a worker's)."""

        def ready() -> bool:
            return all(
                (" ready." if name.startswith("worker") else "beat loaded") in self.log_of(name)
                for name in names
            )

        wait_for(ready, timeout=timeout, what=f"{', '.join(names)} started", poll=0.5)

    def _start(
        self, name: str, argv: list[str], env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        out = (self.logs / f"{name}.log").open("wb")
        process = subprocess.Popen(
            argv, env={**self.env, **(env or {})}, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        out.close()
        self.processes[name] = process
        return process


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)


@pytest.fixture
def cluster(transactional_db: None, tmp_path: Path) -> Iterator[Cluster]:
    running = new_cluster(tmp_path / "logs")
    try:
        yield running
    finally:
        running.stop_all()


def new_cluster(logs: Path) -> Cluster:
    """A cluster of no process yet, on the test database, logging under ``logs`` (the
    ``cluster`` fixture's; a module's own, for processes it shares between its tests)."""
    import tests.support.jobs_under_test
    import tests.support.plain_tasks  # noqa: F401  (plain Celery tasks, scheduled as they are)

    logs.mkdir()
    env = dict(os.environ)
    env.update(
        DATABASE_URL=live_database_url(),
        JOBS_MODULES="tests.support.jobs_under_test,tests.support.plain_tasks",
        JOBS_BEAT_MAX_INTERVAL="0.2",
        DJANGO_DEBUG="1",
        DJANGO_SETTINGS_MODULE="project.settings",
        PYTHONPATH=str(ROOT),
    )
    return Cluster(env=env, queue=f"acceptance-{uuid.uuid4().hex[:8]}", logs=logs)


def has_rabbitmqctl() -> bool:
    return shutil.which(RABBITMQCTL) is not None


def rabbitmqctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RABBITMQCTL, "-q", *args], capture_output=True, text=True, timeout=60, check=True
    )


@contextlib.contextmanager
def rabbitmq_vhost() -> Iterator[str]:
    """The URL of a new virtual host, deleted afterwards (without ``rabbitmqctl``: the default
    vhost, where the test's own queue keeps it apart). Fails when RabbitMQ cannot be reached."""
    try:
        with Connection(AMQP_BASE, connect_timeout=10) as conn:
            conn.ensure_connection(max_retries=3, interval_start=1, interval_step=1)
            user = conn.userid or "guest"
    except Exception as exc:
        pytest.fail(f"RabbitMQ is not reachable at {AMQP_BASE} (JOBS_TEST_AMQP_URL): {exc!r}")
    if not has_rabbitmqctl():
        yield AMQP_BASE.rstrip("/") + "//"
        return
    vhost = f"clusterjobs-test-{uuid.uuid4().hex[:8]}"
    rabbitmqctl("add_vhost", vhost)
    try:
        rabbitmqctl("set_permissions", "-p", vhost, user, ".*", ".*", ".*")
        yield AMQP_BASE.rstrip("/") + "/" + vhost
    finally:
        rabbitmqctl("delete_vhost", vhost)


@pytest.fixture
def amqp_url() -> Iterator[str]:
    with rabbitmq_vhost() as url:
        yield url


@dataclass(frozen=True)
class Broker:
    """The broker a parametrized test runs on: ``kind`` is ``redis`` or ``rabbitmq``."""

    kind: str
    url: str

    def lose_contents(self, queue: str) -> int:
        """What losing the broker's contents looks like. Redis: FLUSHDB of the broker database
        this test process was given (others share the server). RabbitMQ: the test's queue purged
        (its ready messages; those delivered and not yet acknowledged stay with their worker).
        Returns how much there was just before (Redis: keys; RabbitMQ: ready messages)."""
        if self.kind == "redis":
            client = redis.Redis.from_url(self.url)
            try:
                before = int(client.dbsize())
                client.flushdb()
            finally:
                client.close()
            return before
        with Connection(self.url) as conn:
            channel: Any = conn.default_channel
            _name, before, _consumers = channel.queue_declare(queue, passive=True)
            if has_rabbitmqctl():
                rabbitmqctl("purge_queue", "-p", conn.virtual_host, queue)
            else:
                channel.queue_purge(queue)
        return int(before)

    @contextlib.contextmanager
    def producer(self) -> Iterator[Any]:
        """A producer on this broker, for ``jobs.broker.messages.publish`` from the test process
        (whose Celery app is configured with the suite's broker)."""
        with current_app.connection_for_write(self.url) as conn:
            yield conn.Producer()


@pytest.fixture
def pgbouncer(transactional_db: None) -> Iterator[Pooler]:
    """A PgBouncer in transaction pooling in front of the tests' database; see ``use_pooler``."""
    with transaction_pooler(live_database_url()) as pooler:
        yield pooler


@pytest.fixture(params=["redis", "rabbitmq"])
def broker(request: pytest.FixtureRequest) -> Iterator[Broker]:
    """Runs the test on each broker; pass ``broker.url`` to ``Cluster.use_broker``."""
    if request.param == "redis":
        yield Broker("redis", str(settings.CELERY_BROKER_URL))
        return
    with rabbitmq_vhost() as url:
        yield Broker("rabbitmq", url)


# --- Flower's own HTTP API, as an operator's tools read it -------------------------------------

FLOWER_AUTH = "tester:not-a-real-secret-5678"


def flower_json(port: int, path: str, auth: str = FLOWER_AUTH) -> Any:
    """The JSON Flower answers at ``path``, or ``None`` while it is not answering."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def flower_hears(port: int, node: str) -> bool:
    """Whether Flower has heard worker ``node`` (its heartbeat events)."""
    workers = flower_json(port, "/workers?json=1")  # {"data": [{"hostname": ...}, ...]}
    rows = workers.get("data", []) if isinstance(workers, dict) else []
    return any(str(row.get("hostname", "")).startswith(f"{node}@") for row in rows)


def pause_and_wait_for_beats(cluster: Cluster, beats: Iterable[str], names: Iterable[str]) -> None:
    """Pause the jobs ``names``, then wait until each beat in ``beats`` has logged dropping them
    all: until then a beat may still fire a slot of theirs (an edit is picked up within
    JOBS_BEAT_MAX_INTERVAL), so runs counted before it may not be the last."""
    from jobs import services
    from jobs.audit import Actor

    beats = list(beats)
    seen = {beat: len(cluster.log_of(beat)) for beat in beats}
    names = list(names)
    for name in names:
        services.pause(name, actor=Actor.code("tests"))

    def dropped() -> bool:
        return all(
            sum(int(n) for n in re.findall(r"removed (\d+)", cluster.log_of(beat)[seen[beat] :]))
            >= len(names)
            for beat in beats
        )

    wait_for(dropped, timeout=30, what=f"{', '.join(beats)} dropping the paused jobs")


def wait_for(condition: Callable[[], bool], timeout: float, what: str, poll: float = 0.2) -> None:
    """Poll ``condition`` until true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(poll)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A redis-server of the test's own (under ``tmp_path``), killed after."""
    folder = tmp_path / "redis"
    folder.mkdir()
    server = PrivateRedis(folder)
    try:
        yield server
    finally:
        server.kill()


# --- a PostgreSQL of a test's own, to stop and start ------------------------------------------


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    with private_postgres_server("jobs-pg-") as server:
        yield server
