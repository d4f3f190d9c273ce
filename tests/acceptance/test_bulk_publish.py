"""Bursts published in bulk (``jobs.bulk_publish``) are the messages ``send_task`` makes: the same
headers and body bytes on Redis and RabbitMQ; a worker and Flower see a burst's runs as any
others; and a broker killed in the middle of a burst loses none of its runs (maintenance
re-publishes what did not arrive, and a message that arrived twice runs once)."""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import current_app
from django.utils import timezone

from devtools.__main__ import flower_state_options
from devtools.services import free_port
from jobs import bulk_publish, dispatch
from jobs.audit import Actor
from jobs.models import Job, JobRun, RunStatus, Trigger
from jobs.schedule.kinds import Every
from jobs.services import JobDefinition, create_job
from tests.acceptance.conftest import (
    FLOWER_AUTH,
    Broker,
    Cluster,
    flower_hears,
    flower_json,
    wait_for,
)
from tests.acceptance.test_beats_cluster import start_redis
from tests.support import jobs_under_test, plain_tasks  # noqa: F401  (the tasks published here)

pytestmark = pytest.mark.acceptance

TESTS = Actor.code("tests")
HOURLY = Every(3600)


def _job(name: str, queue: str, task: str = "tests.record", **policies: Any) -> Job:
    kwargs = {"log": "/dev/null"}
    return create_job(
        JobDefinition(
            name=name, task=task, schedule=HOURLY, kwargs=kwargs,
            policies={"queue": queue, **policies},
        ),
        actor=TESTS,
    )  # fmt: skip


def _drain(url: str, queue: str) -> dict[str, Any]:
    """Every message waiting in ``queue``, by task id: headers, body bytes, properties."""
    found: dict[str, Any] = {}
    # The app's transport options: on Redis, its priority steps name the lists to read.
    with current_app.connection_for_read(url) as conn:
        channel: Any = conn.default_channel
        while (message := channel.basic_get(queue, no_ack=True)) is not None:
            properties = dict(message.properties)
            properties.pop("delivery_tag", None)  # the broker's own number for the delivery
            properties.pop("delivery_info", None)
            body = message.body if isinstance(message.body, bytes) else message.body.encode()
            found[message.headers["id"]] = (message.headers, body, properties)
    return found


@pytest.mark.django_db
def test_bulk_messages_are_send_tasks_own(broker: Broker) -> None:
    """For jobs of every shape (a job function, two jobs sharing one template but not a display
    name, a priority, a hard time limit, a plain Celery task through the runner task), each
    run's message from a burst equals the one ``send_task`` makes: headers, body bytes and
    properties (but the broker's delivery tag)."""
    queue = f"bulk-identical-{broker.kind}"
    jobs = [
        _job(f"{broker.kind}-plain", queue),
        _job(f"{broker.kind}-twin-a", queue),
        _job(f"{broker.kind}-twin-b", queue),
        _job(f"{broker.kind}-urgent", queue, priority=8),
        _job(f"{broker.kind}-limited", queue, time_limit=30),
        _job(f"{broker.kind}-celery", queue, task="tests.support.plain_tasks.append"),
    ]
    runs = [
        JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.SCHEDULED)
        for job in jobs
        for _ in range(2)
    ]
    with broker.producer() as producer:
        for run in runs:
            dispatch.publish(run.job, run.pk, run.scheduled_for, producer=producer)
        by_send_task = _drain(broker.url, queue)
        sent = bulk_publish.publish_burst(
            [bulk_publish.Publication(run.job, run.pk, run.scheduled_for) for run in runs],
            producer,
        )
        in_bulk = _drain(broker.url, queue)

    assert sent == len(runs)
    assert set(in_bulk) == set(by_send_task) == {f"jobrun-{run.pk}" for run in runs}
    for task_id, (headers, body, properties) in by_send_task.items():
        bulk_headers, bulk_body, bulk_properties = in_bulk[task_id]
        assert bulk_headers == headers, task_id
        assert json.dumps(bulk_headers) == json.dumps(headers), f"{task_id}: header order"
        assert bulk_body == body, task_id
        assert bulk_properties == properties, task_id
    # What the shapes put in the messages really differs (the comparison above is not vacuous).
    urgent = next(v for v in in_bulk.values() if v[0]["shadow"] == f"{broker.kind}-urgent")
    assert urgent[2]["priority"] != in_bulk[f"jobrun-{runs[0].pk}"][2]["priority"]
    limited = next(v for v in in_bulk.values() if v[0]["shadow"] == f"{broker.kind}-limited")
    assert limited[0]["timelimit"][0] == 30
    twin_b = in_bulk[f"jobrun-{runs[4].pk}"]
    assert twin_b[0]["shadow"] == f"{broker.kind}-twin-b"
    assert json.loads(twin_b[1])[1]["job"] == f"{broker.kind}-twin-b"
