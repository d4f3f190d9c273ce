from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.test import Client

import tests.support.jobs_under_test
import tests.support.plain_tasks  # noqa: F401  (registers plain Celery tasks)
from jobs.audit import Actor
from jobs.broker import messages
from jobs.conf import get_alerts_conf
from jobs.models import Job
from jobs.schedule.kinds import Schedule
from jobs.web import tokens
from tests.support.cached_settings import overriding
from tests.support.job_factory import HOURLY, new_job

# The webhook secret the ``alerts_to`` fixture configures: receivers verify signatures with it.
ALERT_SECRET = "s" * 40

# (run id, eta) of each message the runner would have published.
Published = list[tuple[int, datetime | None]]


@pytest.fixture
def make_job(tmp_path: Path) -> Callable[..., Job]:
    """``job_factory.new_job``, a ``tests.record`` job's log in the test's own directory."""

    def make(
        name: str = "j",
        task: str = "tests.record",
        schedule: Schedule | None = HOURLY,
        kwargs: dict[str, Any] | None = None,
        **policies: Any,
    ) -> Job:
        if kwargs is None:
            kwargs = {"log": str(tmp_path / "executions.log")} if task == "tests.record" else {}
        return new_job(name, task, schedule, kwargs=kwargs, **policies)

    return make


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> Published:
    """Messages the runner would send (retries, hand-backs), captured instead of sent."""
    sent: Published = []

    def publish(job: Job, run_id: int, scheduled_for: datetime, *_: Any, **options: Any) -> None:
        sent.append((run_id, options.get("eta")))

    monkeypatch.setattr(messages, "publish", publish)
    return sent


@pytest.fixture
def insider(db: None) -> Client:
    """A client that may see the cluster's internals (``jobs.web.access``): it sends an API token,
    so the probes answer it their details."""
    secret = tokens.create("insider", actor=Actor.code("tests"))[1]
    return Client(headers={"authorization": f"Bearer {secret}"})


@pytest.fixture
def redis_broker(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    """The suite's Redis broker as a Redis client (acceptance's ``broker`` is a parametrised
    Broker), the test module's ``QUEUE`` emptied before and after."""
    if not str(settings.CELERY_BROKER_URL).startswith("redis://"):
        pytest.fail("these tests read the queue from Redis; CELERY_BROKER_URL is not Redis")
    queue = request.module.QUEUE
    client = redis.Redis.from_url(str(settings.CELERY_BROKER_URL))
    client.delete(queue)
    yield client
    client.delete(queue)
    client.close()


@pytest.fixture
def alerts_to() -> Iterator[Callable[..., None]]:
    """Point the alert settings somewhere for one test (they are read once, then cached)."""
    with overriding(get_alerts_conf) as override:

        def configure(
            url: str = "",
            emails: tuple[str, ...] = (),
            public_url: str = "https://jobs.example.com",
        ) -> None:
            override(
                JOBS_ALERT_WEBHOOK_URL=url,
                JOBS_ALERT_WEBHOOK_SECRET=ALERT_SECRET,
                JOBS_ALERT_EMAILS=list(emails),
                JOBS_PUBLIC_URL=public_url,
                # The suite's receivers listen on 127.0.0.1, a loopback target.
                JOBS_ALERT_ALLOW_PRIVATE_TARGETS=True,
            )

        yield configure


@pytest.fixture
def healing(tmp_path: Path) -> Path:
    """The file that makes ``tests.fail_until`` succeed once it exists."""
    return tmp_path / "healed"


@pytest.fixture
def beat_schedule() -> Iterator[dict[str, Any]]:
    """The app's beat_schedule, emptied for the test and restored after it."""
    from project.celery import app

    saved = dict(app.conf.beat_schedule or {})
    app.conf.beat_schedule = {}
    try:
        yield app.conf.beat_schedule
    finally:
        app.conf.beat_schedule = saved
