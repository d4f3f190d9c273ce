"""The connection budget of each process kind (docs/connections.md), against real processes.

- A web process with ``DATABASE_POOL_MAX_SIZE`` holds at most that many connections however many
  clients it serves at once; a request that finds them all busy waits ``DATABASE_POOL_TIMEOUT``
  and is answered 503 JSON with ``Retry-After`` (the API and the admin alike), never a 500.
- A beat or a worker refuses the pool: it stops at start with one line naming the setting.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.contrib.auth.models import User
from django.test import Client

from devtools.pgbouncer import transaction_pooler
from devtools.services import free_port
from jobs.audit import Actor
from jobs.web import tokens
from tests.acceptance.conftest import live_database_url

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
WEB = "clusterjobs web"


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: Any
    seconds: float


@dataclass
class Web:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def get(self, path: str, headers: dict[str, str] | None = None) -> Answer:
        request = urllib.request.Request(self.url + path, headers=headers or {})
        started = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status, raw, found = response.status, response.read(), response.headers
        except urllib.error.HTTPError as error:
            status, raw, found = error.code, error.read(), error.headers
        body: Any = raw.decode(errors="replace")
        if found.get("Content-Type", "").startswith("application/json"):
            body = json.loads(raw)
        return Answer(status, dict(found.items()), body, time.monotonic() - started)


def _env(**overrides: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": live_database_url(),
        "DJANGO_DEBUG": "1",
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "PYTHONPATH": str(ROOT),
        **overrides,
    }


@contextlib.contextmanager
def _web(tmp_path: Path, pool: int, timeout: float, **env: str) -> Iterator[Web]:
    """``manage.py runserver`` (a thread per request), its requests sharing a pool of ``pool``;
    ``env``: more variables."""
    port = free_port()
    log = tmp_path / "web.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "manage.py"),
                "runserver",
                f"127.0.0.1:{port}",
                "--noreload",
            ],
            env=_env(DATABASE_POOL_MAX_SIZE=str(pool), DATABASE_POOL_TIMEOUT=str(timeout), **env),
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    web = Web(f"http://127.0.0.1:{port}", process, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError):
                if web.get("/livez").status == 200:
                    break
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the web process did not answer within 60 s"
            time.sleep(0.2)
        yield web
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _web_connections(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND datname = "
        "current_database()",
        [WEB],
    ).fetchone()
    assert row is not None
    return int(row[0])


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def bearer() -> dict[str, str]:
    secret = tokens.create("budget", actor=Actor.code("tests"))[1]
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def session() -> dict[str, str]:
    """The cookie of a logged-in superuser's session (stored in the database, so the web
    process finds it)."""
    browser = Client()
    browser.force_login(User.objects.create_superuser("root", password="x"))
    return {"Cookie": f"sessionid={browser.cookies['sessionid'].value}"}


def test_many_clients_share_the_pool_and_the_web_holds_no_more(
    tmp_path: Path, bearer: dict[str, str]
) -> None:
    with (
        _web(tmp_path, pool=2, timeout=10) as web,
        psycopg.connect(live_database_url(), autocommit=True) as watcher,
    ):
        peak = 0
        done = threading.Event()

        def watch() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, _web_connections(watcher))
                time.sleep(0.01)

        sampler = threading.Thread(target=watch)
        sampler.start()
        try:
            with concurrent.futures.ThreadPoolExecutor(12) as clients:
                answers = list(
                    clients.map(lambda _: web.get("/api/runs?limit=1", bearer).status, range(240))
                )
        finally:
            done.set()
            sampler.join()
        assert answers == [200] * 240
        assert 1 <= peak <= 2, peak
        assert "Traceback" not in web.log.read_text()


def test_a_request_that_finds_the_pool_busy_waits_its_timeout_then_gets_a_503(
    tmp_path: Path, bearer: dict[str, str], session: dict[str, str]
) -> None:
    with (
        _web(tmp_path, pool=1, timeout=0.5) as web,
        psycopg.connect(live_database_url(), autocommit=True) as watcher,
        psycopg.connect(live_database_url()) as locker,
    ):
        # The pool's one connection stays busy: a request waits on a lock the test holds.
        locker.execute("LOCK TABLE jobs_jobrun IN ACCESS EXCLUSIVE MODE")
        with concurrent.futures.ThreadPoolExecutor(1) as first:
            held = first.submit(web.get, "/api/runs?limit=1", bearer)
            _wait_for(
                lambda: (
                    watcher.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                        "AND wait_event_type = 'Lock'",
                        [WEB],
                    ).fetchone()
                    == (1,)
                ),
                10,
                "the first request to hold the pool's connection",
            )
            api = web.get("/api/jobs", bearer)
            admin = web.get("/admin/jobs/job/", session)
            assert _web_connections(watcher) == 1
            locker.commit()
            assert held.result(timeout=10).status == 200

        busy = "the server is busy: no database connection became free within 0.5 s; retry later"
        for answer in (api, admin):
            assert answer.status == 503, answer.body
            assert answer.body == {"error": busy}
            assert answer.headers["Retry-After"] == "1"
            assert 0.45 <= answer.seconds < 5
        # The pool is whole again once the lock is gone.
        assert web.get("/admin/jobs/job/", session).status == 200
        log = web.log.read_text()
        assert "Traceback" not in log
        assert log.count("couldn't get a connection after 0.50 sec") == 2


def test_the_pool_works_behind_a_transaction_pooler(tmp_path: Path, bearer: dict[str, str]) -> None:
    """PgBouncer in transaction pooling (``DATABASE_POOLER=transaction``) in front: the web's
    pooled connections are the pooler's clients, each checked with an empty query when lent."""
    with (
        transaction_pooler(live_database_url()) as pooler,
        _web(
            tmp_path, pool=2, timeout=10, DATABASE_URL=pooler.url, DATABASE_POOLER="transaction"
        ) as web,
    ):
        with concurrent.futures.ThreadPoolExecutor(6) as clients:
            answers = list(
                clients.map(lambda _: web.get("/api/runs?limit=1", bearer).status, range(60))
            )
        assert answers == [200] * 60
        assert web.get("/readyz").status == 200
        assert "Traceback" not in web.log.read_text()


@pytest.mark.parametrize(
    ("command", "process"), [(["worker", "-P", "solo"], "celery worker"), (["beat"], "celery beat")]
)
def test_beats_and_workers_refuse_the_pool(command: list[str], process: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "project", *command, "-l", "info"],
        env=_env(DATABASE_POOL_MAX_SIZE="2"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert (
        f"configuration error: {process} refuses Django's connection pool "
        "(DATABASES['default']['OPTIONS']['pool'], set by DATABASE_POOL_MAX_SIZE)"
    ) in result.stderr + result.stdout
