"""Real ``celery worker`` / ``celery beat`` subprocesses against the test database.

Each test gets its own queue, so workers never see another test's (or a dev platform's)
messages, and every process is stopped (its whole process group) before the database is flushed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
STOP_GRACE_SECONDS = 15


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

    def start_worker(
        self, name: str, concurrency: int = 2, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        argv = [
            sys.executable, "-m", "celery", "-A", "project", "worker",
            "-n", f"{name}@%h", "-Q", self.queue, "-c", str(concurrency),
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
    import tests.jobs_under_test  # noqa: F401  (the functions the workers will run)

    logs = tmp_path / "logs"
    logs.mkdir()
    env = dict(os.environ)
    env.update(
        DATABASE_URL=live_database_url(),
        JOBS_MODULES="tests.jobs_under_test",
        JOBS_BEAT_MAX_INTERVAL="0.2",
        DJANGO_DEBUG="1",
        DJANGO_SETTINGS_MODULE="project.settings",
        PYTHONPATH=str(ROOT),
    )
    running = Cluster(env=env, queue=f"acceptance-{uuid.uuid4().hex[:8]}", logs=logs)
    try:
        yield running
    finally:
        running.stop_all()


def wait_for(condition: Callable[[], bool], timeout: float, what: str, poll: float = 0.2) -> None:
    """Poll ``condition`` until true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(poll)
