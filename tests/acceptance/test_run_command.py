"""The README's run command on a machine with no configured services: it starts embedded
PostgreSQL and Redis, the whole platform, records demo runs, and Ctrl-C leaves nothing behind."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import psutil
import psycopg
import pytest

from devtools.services import free_port
from tests.acceptance.conftest import ROOT, wait_for

pytestmark = pytest.mark.acceptance

FLOWER_AUTH = "tester:not-a-real-secret-1234"


def _status(url: str, auth: str | None = None) -> int:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def _succeeded_demo_runs_since(started: datetime) -> int:
    try:
        with psycopg.connect(
            host=str(ROOT / ".dev" / "postgres"), user="postgres", dbname="jobs"
        ) as conn:
            row = conn.execute(
                "SELECT count(*) FROM jobs_jobrun r JOIN jobs_job j ON j.id = r.job_id "
                "WHERE j.name = 'demo.quick' AND r.status = 'succeeded' AND r.created_at >= %s",
                [started],
            ).fetchone()
    except psycopg.OperationalError:
        return 0
    return int(row[0]) if row else 0


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_make_run_starts_everything_on_embedded_services_and_ctrl_c_stops_it(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    web_port, flower_port = free_port(), free_port()
    env.update(WEB_PORT=str(web_port), FLOWER_PORT=str(flower_port), FLOWER_BASIC_AUTH=FLOWER_AUTH)
    started = datetime.now(UTC)
    output = (tmp_path / "make-run.log").open("wb")
    platform = subprocess.Popen(
        ["make", "run"], cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    descendants: set[int] = set()
    try:

        def platform_up() -> bool:
            assert platform.poll() is None, (tmp_path / "make-run.log").read_text()
            descendants.update(p.pid for p in psutil.Process(platform.pid).children(recursive=True))
            return _status(f"http://127.0.0.1:{web_port}/admin/login/") == 200

        wait_for(platform_up, timeout=180, what="the admin login page")
        flower = f"http://127.0.0.1:{flower_port}/"
        wait_for(lambda: _status(flower, FLOWER_AUTH) == 200, timeout=60, what="Flower")
        assert _status(flower) == 401, "Flower must require basic auth"
        wait_for(
            lambda: _succeeded_demo_runs_since(started) >= 1,
            timeout=60,
            what="a succeeded demo.quick run in the embedded database",
        )
        descendants.update(p.pid for p in psutil.Process(platform.pid).children(recursive=True))
        commands = [psutil.Process(pid).cmdline() for pid in descendants if psutil.pid_exists(pid)]
        beats = [c for c in commands if "beat" in c]
        worker_names = {c[c.index("-n") + 1] for c in commands if "worker" in c and "-n" in c}
        assert len(beats) == 2, commands
        assert worker_names == {"worker1@%h", "worker2@%h"}, commands
    finally:
        os.killpg(platform.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        try:
            platform.wait(timeout=60)
        finally:
            output.close()
    log = (tmp_path / "make-run.log").read_text()
    assert ("password" in log and "Dev admin created" in log) or "superuser already exists" in log

    def all_gone() -> bool:
        return not [pid for pid in descendants if _alive(pid)]

    wait_for(all_gone, timeout=20, what="every process the run command started to exit")
