"""No password leaves a real worker through what Celery shows of its configuration: the ``conf``
inspect reply, ``stats``, ``celery report``, and Flower's page of the worker (its Config and
Broker tabs) and API. The broker is a Redis of the test's own that demands a password, so the worker
really uses the URL that carries it."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from devtools.services import free_port, start_redis
from tests.acceptance.conftest import ROOT, Cluster, live_database_url, wait_for

pytestmark = pytest.mark.acceptance


def _get(port: int, path: str, auth: str) -> str | None:
    """The body at ``path`` (HTTP basic auth), or ``None`` while Flower does not answer it."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return str(response.read().decode())
    except (urllib.error.URLError, OSError):
        return None


def test_no_password_in_a_workers_conf_and_stats_replies_or_in_celery_report(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marks = {
        name: f"{name.lower()}-{uuid.uuid4().hex}"
        for name in ("broker", "database", "secret_key", "flower")
    }
    folder = tmp_path / "redis"
    folder.mkdir()
    port = free_port()
    redis = start_redis(folder, port, "--requirepass", marks["broker"])
    try:
        broker_url = f"redis://:{marks['broker']}@127.0.0.1:{port}/0"
        cluster.use_broker(broker_url)
        # The test database trusts local connections, so a password in its URL is never sent,
        # only carried: exactly what must not be shown.
        scheme, _, rest = live_database_url().partition("://")
        user, _, location = rest.partition("@")
        assert ":" not in user, "the test database URL has a password already"
        database_url = f"{scheme}://{user}:{marks['database']}@{location}"
        cluster.env.update(
            DATABASE_URL=database_url,
            CELERY_RESULT_BACKEND=broker_url,  # Celery reads it from the environment first
            DJANGO_SECRET_KEY=marks["secret_key"] + "-" * 20,
            FLOWER_BASIC_AUTH=f"admin:{marks['flower']}",
        )
        cluster.start_worker("leaky", concurrency=1)

        # Asked as Flower asks, from an app of its own on that broker (Celery reads the
        # variable ahead of any setting, and the suite's app publishes to the suite's broker).
        monkeypatch.setenv("CELERY_BROKER_URL", broker_url)
        inspect = Celery("inspector", set_as_current=False).control.inspect(timeout=2.0)
        wait_for(lambda: bool(inspect.ping()), timeout=60, what="the worker to answer")
        replies: dict[str, Any] = {
            "conf": inspect.conf(),
            "conf with defaults": inspect.conf(with_defaults=True),
            "stats": inspect.stats(),
        }
        report = subprocess.run(
            [sys.executable, "-m", "celery", "-A", "project", "report"],
            env=cluster.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        # Flower's worker page (its Config and Broker tabs) and its API, asked to refresh.
        (worker,) = replies["conf"]
        flower_port = free_port()
        cluster.start_flower("flower", flower_port, [])
        flower_auth = f"admin:{marks['flower']}"

        def flower_page(path: str) -> str | None:
            return _get(flower_port, path, flower_auth)

        wait_for(
            lambda: "CELERY_BROKER_URL" in (flower_page(f"/worker/{worker}") or ""),
            timeout=60,
            what="Flower's page of the worker with its configuration",
        )
        shown_by_flower = {
            "flower worker page": flower_page(f"/worker/{worker}") or "",
            "flower api": flower_page(f"/api/workers?refresh=1&workername={worker}") or "",
        }
    finally:
        cluster.stop_all()
        redis.kill()
        redis.wait()

    (conf,) = replies["conf"].values()
    # The replies are the worker's real configuration, its broker URL masked.
    assert conf["CELERY_BROKER_URL"] == f"redis://:********@127.0.0.1:{port}/0"
    # Not even where the database is and who logs in (Celery masks its password alone).
    assert conf["DATABASES"] == "********"
    assert report.returncode == 0, report.stderr
    assert f"CELERY_BROKER_URL: 'redis://:********@127.0.0.1:{port}/0'" in report.stdout
    shown = {name: json.dumps(reply) for name, reply in replies.items()}
    shown["celery report"] = report.stdout + report.stderr
    shown.update(shown_by_flower)
    assert f"redis://:********@127.0.0.1:{port}/0" in shown["flower api"]
    leaks = [
        (where, mark) for where, text in shown.items() for mark in marks.values() if mark in text
    ]
    assert not leaks, f"secrets shown: {leaks}"
