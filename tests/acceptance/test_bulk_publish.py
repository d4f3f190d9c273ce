"""Bursts published in bulk (``jobs.broker.bulk_publish``) are the messages ``send_task`` makes: the
same headers and body bytes on Redis and RabbitMQ; a worker and Flower see a burst's runs as any
others; and a broker killed in the middle of a burst loses none of its runs (maintenance
re-publishes what did not arrive, and a message that arrived twice runs once)."""

from __future__ import annotations

import json
import signal
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import amqp
import kombu
import pytest
import redis
from celery import current_app
from django.db import transaction
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from bench.beat_bench import create_jobs
from devtools.__main__ import flower_state_options
from devtools.rabbitmq import private_rabbitmq_node
from devtools.services import free_port
from jobs.audit import Actor
from jobs.broker import bulk_publish, messages
from jobs.broker.amqp_frames import BufferedPublishing
from jobs.models import Job, JobRun, RunStatus, Trigger
from jobs.schedule.kinds import At
from jobs.services import JobDefinition, create_job
from tests.acceptance.conftest import (
    FLOWER_AUTH,
    Broker,
    Cluster,
    flower_hears,
    flower_json,
    wait_for,
)
from tests.support import jobs_under_test, plain_tasks  # noqa: F401  (the tasks published here)
from tests.support.celery_events import events_heard
from tests.support.job_factory import new_job
from tests.support.private_redis import PrivateRedis
from tests.support.slot_history import BEAT_ENV, count_executions

pytestmark = pytest.mark.acceptance

TESTS = Actor.code("tests")
NOWHERE = "/dev/null"  # what the record jobs would append to, were they run
PLAIN_APPEND = "tests.support.plain_tasks.append"


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
def test_bulk_messages_are_send_tasks_own(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """For jobs of every shape (a job function, two jobs sharing one template but not a display
    name, a priority, a hard time limit, a plain Celery task through the runner task), each
    run's message from a burst equals the one ``send_task`` makes: headers, body bytes and
    properties (but the broker's delivery tag). On RabbitMQ every one of them was framed by the
    compiled frames (``amqp_frames.MessageFrames``) around a composed body, not by kombu and
    py-amqp."""
    compiled: list[bytes] = []  # what the burst buffered as compiled frames
    add = BufferedPublishing.add

    def counted_add(self: BufferedPublishing, frames: bytes) -> None:
        compiled.append(frames)
        add(self, frames)

    monkeypatch.setattr(BufferedPublishing, "add", counted_add)
    composed: list[str] = []  # bodies made from the text around the kwargs, not by kombu
    compose = bulk_publish._composed_body

    def counted_compose(around: tuple[str, str], kwargs: dict[str, Any]) -> str:
        composed.append(compose(around, kwargs))
        return composed[-1]

    monkeypatch.setattr(bulk_publish, "_composed_body", counted_compose)
    queue = f"bulk-identical-{broker.kind}"
    jobs = [
        new_job(f"{broker.kind}-plain", log=NOWHERE, queue=queue),
        new_job(f"{broker.kind}-twin-a", log=NOWHERE, queue=queue),
        new_job(f"{broker.kind}-twin-b", log=NOWHERE, queue=queue),
        new_job(f"{broker.kind}-urgent", log=NOWHERE, queue=queue, priority=8),
        new_job(f"{broker.kind}-limited", log=NOWHERE, queue=queue, time_limit=30),
        new_job(f"{broker.kind}-celery", PLAIN_APPEND, log=NOWHERE, queue=queue),
        new_job(f"{broker.kind}-adopted", PLAIN_APPEND, log=NOWHERE, queue=queue),
    ]
    # An adopted django-celery-beat row's message options: its headers (and django-celery-beat's
    # periodic_task_name), an expiry; Celery computes the expiry's TTL from its clock, held here.
    Job.objects.filter(pk=jobs[-1].pk).update(
        adopted=True, headers={"tenant": "acme", "trace": {"ids": [1, 2]}},
        expires_at=timezone.now() + timedelta(hours=1),
    )  # fmt: skip
    jobs[-1].refresh_from_db()
    held = timezone.now()
    monkeypatch.setattr(current_app, "now", lambda: held)
    runs = [
        JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.SCHEDULED)
        for job in jobs
        for _ in range(2)
    ]
    with broker.producer() as producer:
        for run in runs:
            messages.publish(run.job, run.pk, run.scheduled_for, producer=producer)
        by_send_task = _drain(broker.url, queue)
        sent = bulk_publish.publish_burst(
            [bulk_publish.Publication(run.job, run.pk, run.scheduled_for) for run in runs],
            producer,
        )
        in_bulk = _drain(broker.url, queue)

    assert sent == len(runs)
    assert len(compiled) == (len(runs) if broker.kind == "rabbitmq" else 0)
    assert len(composed) >= (len(runs) if broker.kind == "rabbitmq" else 0)
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
    adopted = next(v for v in in_bulk.values() if v[0]["shadow"] == f"{broker.kind}-adopted")
    assert adopted[0]["periodic_task_name"] == f"{broker.kind}-adopted"
    assert adopted[0]["trace"] == {"ids": [1, 2]} and adopted[0]["expires"]
    twin_b = in_bulk[f"jobrun-{runs[4].pk}"]
    assert twin_b[0]["shadow"] == f"{broker.kind}-twin-b"
    assert json.loads(twin_b[1])[1]["job"] == f"{broker.kind}-twin-b"


# What differs between two sendings of one event: when, the sender's logical clock, and when
# the receiver got it.
_WHEN = ("timestamp", "clock", "local_received")


@pytest.mark.django_db
def test_each_run_of_a_burst_sends_the_task_sent_event_send_task_sends(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real events receiver (as ``celery events`` and Flower) hears one ``task-sent`` event
    per run of a burst, equal to the one ``send_task`` sends for the run but for its time and
    logical clock: the task id, the job as display name, the arguments' repr, the queue. The
    burst's events came in one message, as Celery sends a batch of events (``task.multi``),
    each composed (``_SentEvent.body_text``), not serialized by kombu."""
    composed: list[str] = []
    body_text = bulk_publish._SentEvent.body_text

    def counted(self: Any, event: dict[str, Any]) -> str:
        composed.append(body_text(self, event))
        return composed[-1]

    monkeypatch.setattr(bulk_publish._SentEvent, "body_text", counted)
    batches: list[int] = []  # the events of each message of events the burst sent
    publish_batch = bulk_publish._SentEvent.publish_batch

    def counted_batch(self: Any, producer: Any, events: list[Any]) -> None:
        batches.append(len(events))
        publish_batch(self, producer, events)

    monkeypatch.setattr(bulk_publish._SentEvent, "publish_batch", counted_batch)
    queue = f"bulk-events-{broker.kind}"
    jobs = [
        new_job(f"{broker.kind}-events-fn", log=NOWHERE, queue=queue),
        new_job(f"{broker.kind}-events-celery", PLAIN_APPEND, log=NOWHERE, queue=queue),
    ]
    runs = [
        JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.SCHEDULED)
        for job in jobs
        for _ in range(3)
    ]
    task_ids = {messages.task_id_for(run.pk) for run in runs}
    with events_heard(broker.url) as heard, broker.producer() as producer:
        for run in runs:
            messages.publish(run.job, run.pk, run.scheduled_for, producer=producer)
        by_send_task = heard.wait_for("task-sent", len(runs), queue=queue)
        sent = bulk_publish.publish_burst(
            [bulk_publish.Publication(run.job, run.pk, run.scheduled_for) for run in runs],
            producer,
        )
        in_bulk = heard.wait_for("task-sent", 2 * len(runs), queue=queue)[len(runs) :]
    _drain(broker.url, queue)

    assert sent == len(runs)
    assert len(composed) >= len(runs)
    assert batches == [len(runs)]
    assert sorted(event["uuid"] for event in in_bulk) == sorted(task_ids)
    own = {event["uuid"]: event for event in by_send_task}
    for event in in_bulk:
        expected = {k: v for k, v in own[event["uuid"]].items() if k not in _WHEN}
        assert {k: v for k, v in event.items() if k not in _WHEN} == expected
        assert event["clock"] > own[event["uuid"]]["clock"]
    assert {event["name"] for event in in_bulk} == {job.name for job in jobs}


@pytest.mark.django_db
def test_rabbitmq_confirms_are_counted_chunk_by_chunk(
    amqp_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Three chunks of a burst on one confirm channel (each chunk's confirms awaited only when
    the next is handed over), routed to a queue RabbitMQ caps at 700 messages, refusing the
    rest with a nack: the first chunk counts as sent; the second (200 taken, 300 refused) and
    the third (all refused) count as not sent and are logged with their runs, which stay
    ``scheduled`` for maintenance."""
    suffix = uuid.uuid4().hex[:8]
    exchange, capped = f"bulk-capped-{suffix}", f"bulk-capped-{suffix}"
    job = new_job(f"capped-{suffix}", log=NOWHERE, queue=f"bulk-declared-{suffix}")
    job.exchange, job.routing_key = exchange, "capped"
    job.save(update_fields=["exchange", "routing_key"])
    now = timezone.now()
    runs = JobRun.objects.bulk_create(
        JobRun(job=job, scheduled_for=now, trigger=Trigger.MANUAL) for _ in range(1500)
    )
    with current_app.connection_for_write(amqp_url) as conn:
        channel: Any = conn.channel()
        channel.exchange_declare(exchange, "direct", durable=True, auto_delete=False)
        channel.queue_declare(
            capped, durable=True, auto_delete=False,
            arguments={"x-max-length": 700, "x-overflow": "reject-publish"},
        )  # fmt: skip
        channel.queue_bind(capped, exchange, "capped")
        try:
            with bulk_publish.Burst(conn.Producer()) as burst:
                for start in range(0, 1500, 500):
                    chunk = runs[start : start + 500]
                    burst.publish(
                        [bulk_publish.Publication(job, run.pk, run.scheduled_for) for run in chunk]
                    )
            _name, held, _consumers = channel.queue_declare(capped, passive=True)
        finally:
            channel.queue_delete(capped)
            channel.queue_delete(f"bulk-declared-{suffix}")
            channel.exchange_delete(exchange)

    assert held == 700
    assert burst.sent == 500
    failed = [r.__dict__ for r in caplog.records if getattr(r, "action", None) == "publish_failed"]
    # The log names each failed chunk's first 100 runs, and what RabbitMQ refused of it.
    assert [f["run_ids"][0] for f in failed] == [runs[500].pk, runs[1000].pk]
    assert [len(f["run_ids"]) for f in failed] == [100, 100]
    assert "refused 300 message(s)" in str(failed[0]["exc_text"])
    assert "refused 500 message(s)" in str(failed[1]["exc_text"])
    assert JobRun.objects.filter(job=job, status=RunStatus.SCHEDULED).count() == 1500


def _burst_jobs(count: int, queue: str, log: Path, slot: datetime, prefix: str) -> list[Job]:
    """``count`` one-off jobs due at ``slot``, made through the services (so the beats pick
    them up as any edit)."""
    jobs = []
    with transaction.atomic():
        for n in range(count):
            definition = JobDefinition(
                name=f"{prefix}-{n}", task="tests.record", schedule=At(slot),
                kwargs={"log": str(log)}, policies={"queue": queue},
            )  # fmt: skip
            jobs.append(create_job(definition, actor=TESTS))
    return jobs


def _all_done(jobs: list[Job]) -> bool:
    runs = JobRun.objects.filter(job__in=jobs)
    return runs.count() == len(jobs) and not runs.exclude(status=RunStatus.SUCCEEDED).exists()


def _assert_each_ran_once(jobs: list[Job], log: Path) -> list[JobRun]:
    runs = list(JobRun.objects.filter(job__in=jobs))
    assert len(runs) == len(jobs), "one run per job's slot"
    assert {run.status for run in runs} == {RunStatus.SUCCEEDED}
    executions = count_executions(log)
    assert set(executions) == {run.pk for run in runs}
    assert set(executions.values()) == {1}, "a run executed twice"
    return runs


def _a_worker_runs_each_once_some_re_published(
    cluster: Cluster, jobs: list[Job], log: Path, slot: datetime
) -> None:
    """After a broker outage mid-burst: a worker starts and every run executes, once; some went
    out twice (their first message died with the broker): maintenance's."""
    cluster.start_worker("worker", concurrency=4)

    wait_for(lambda: _all_done(jobs), 180, "every run of the burst succeeded")
    runs = _assert_each_ran_once(jobs, log)
    assert any(run.dispatched_at and run.dispatched_at > slot + timedelta(seconds=1)
               for run in runs), "no run was re-published"  # fmt: skip


def test_a_burst_runs_once_and_flower_and_the_worker_see_it_as_usual(
    cluster: Cluster, broker: Broker, tmp_path: Path
) -> None:
    """150 slots due at once (a burst: more than ``dispatch.BURST_OVER``) with two beats, a
    worker and Flower: each run executes once, the worker names it by its job, and Flower lists
    each as a SUCCESS under the job's name."""
    cluster.use_broker(broker.url)
    port = free_port()
    cluster.start_flower(
        "flower", port, flower_state_options(tmp_path / "flower.db"),
        {"FLOWER_BASIC_AUTH": FLOWER_AUTH},
    )  # fmt: skip
    cluster.start_worker("node-a", concurrency=4)
    for name in ("beat-1", "beat-2"):
        cluster.start_beat(name, env=BEAT_ENV)
    wait_for(lambda: flower_hears(port, "node-a"), 90, "Flower receiving the worker's events")
    wait_for(
        lambda: all("beat loaded" in cluster.log_of(name) for name in ("beat-1", "beat-2")),
        90,
        "both beats loaded",
    )
    log = tmp_path / "executions.log"
    slot = timezone.now().replace(microsecond=0) + timedelta(seconds=6)
    jobs = _burst_jobs(150, cluster.queue, log, slot, "burst")

    wait_for(lambda: _all_done(jobs), 120, "every run of the burst succeeded")
    runs = _assert_each_ran_once(jobs, log)
    fired = [
        line
        for name in ("beat-1", "beat-2")
        for line in cluster.log_of(name).splitlines()
        if "beat fired 150 slot(s)" in line
    ]
    assert fired, "no beat fired the 150 slots in one tick (no burst)"
    worker_log = cluster.log_of("node-a")
    for run in runs:
        assert f"Task {run.job.name}[jobrun-{run.pk}] received" in worker_log, run.job.name

    def flower_has_all() -> bool:
        tasks = flower_json(port, "/api/tasks?limit=1000")
        return isinstance(tasks, dict) and all(
            tasks.get(f"jobrun-{run.pk}", {}).get("state") == "SUCCESS" for run in runs
        )

    wait_for(flower_has_all, 60, "Flower listing every run of the burst as a SUCCESS")
    tasks = flower_json(port, "/api/tasks?limit=1000")
    assert {tasks[f"jobrun-{run.pk}"]["name"] for run in runs} == {job.name for job in jobs}


BEATS = ("beat-1", "beat-2")


def _burst_due_soon(
    cluster: Cluster, url: str, log: Path, beat_env: dict[str, str] = BEAT_ENV
) -> tuple[list[Job], datetime]:
    """Two beats on the broker at ``url``, loaded, and 2,000 jobs whose slot comes in 8 s, each
    run appending to ``log``: the jobs and their slot."""
    cluster.use_broker(url)
    for name in BEATS:
        cluster.start_beat(name, env=beat_env)
    wait_for(
        lambda: all("beat loaded" in cluster.log_of(name) for name in BEATS),
        90,
        "both beats loaded",
    )
    # In bulk, as the beat benchmark makes them (the services take ~20 ms a job), and their
    # slot set last, in the same transaction: the beats see the jobs only at its commit, so
    # however long making them took on a busy machine, their slot is 8 s after the beats do.
    with transaction.atomic():
        create_jobs(
            2_000, queue=cluster.queue, task="tests.record", every=lambda n: 3600,
            anchor=timezone.now() + timedelta(days=1), prefix="killed",
            kwargs=lambda n: {"log": str(log)},
        )  # fmt: skip
        jobs = list(Job.objects.filter(name__startswith="killed-"))
        slot = timezone.now().replace(microsecond=0) + timedelta(seconds=8)
        PeriodicTask.objects.filter(job__in=jobs).update(start_time=slot)
    assert timezone.now() < slot - timedelta(seconds=2), "jobs made too slowly for the slot"
    return jobs, slot


def test_a_redis_killed_mid_burst_loses_no_run(
    cluster: Cluster, private_redis: PrivateRedis, tmp_path: Path
) -> None:
    """2,000 slots due at once from two beats into a Redis of the test's own. Once part of the
    burst is in it, the beats are frozen (SIGSTOP) mid-burst, Redis is killed (it keeps
    nothing), the beats go on for a second while it is down (their publishes fail), and it
    starts again; only then a worker starts. Every run executes, once: maintenance re-publishes
    what the kill lost and what could not be sent."""
    url = private_redis.url
    try:
        log = tmp_path / "executions.log"
        jobs, slot = _burst_due_soon(cluster, url, log)

        client = redis.Redis.from_url(url)
        wait_for(
            lambda: client.llen(cluster.queue) >= 500, 60, "part of the burst in Redis", poll=0.002
        )
        for name in BEATS:
            cluster.kill(name, signal.SIGSTOP)
        in_redis = client.llen(cluster.queue)
        assert in_redis < len(jobs), "the whole burst was out before the beats froze"
        client.close()
        private_redis.kill()
        for name in BEATS:
            cluster.kill(name, signal.SIGCONT)
        time.sleep(1)  # the outage: the beats' next publishes meet no Redis
        private_redis.start()
        _a_worker_runs_each_once_some_re_published(cluster, jobs, log, slot)
    finally:
        cluster.stop_all()


def test_beats_told_to_stop_mid_burst_publish_every_slot_they_recorded(
    cluster: Cluster, private_redis: PrivateRedis, tmp_path: Path
) -> None:
    """Both beats are told to stop (SIGTERM, as a deploy does) while a burst of 2,000 slots is
    on its way into Redis. Each stops once its tick is done (jobs.beat.graceful_stop), so every
    run recorded by then went out and is stamped so, with no maintenance pass to make up for
    it. Maintenance waits longer than the test lasts before it re-publishes a run: with the
    suite's 2 s, on a loaded machine the other beat re-published runs of a tick still going
    (they are stamped when the tick ends), which would also hide a beat that left some out."""
    url = private_redis.url
    no_republish = {**BEAT_ENV, "JOBS_REPUBLISH_AFTER": "600"}
    try:
        jobs, _ = _burst_due_soon(cluster, url, tmp_path / "executions.log", no_republish)
        client = redis.Redis.from_url(url)
        wait_for(
            lambda: client.llen(cluster.queue) >= 200, 60, "part of the burst in Redis", poll=0.002
        )
        for name in BEATS:
            cluster.kill(name, signal.SIGTERM)
        assert client.llen(cluster.queue) < len(jobs), "the whole burst was out before the stop"
        for name in BEATS:
            cluster.processes[name].wait(timeout=60)
        runs = JobRun.objects.filter(job__in=jobs, trigger=Trigger.SCHEDULED)
        assert runs.count() == len(jobs), "a beat stopped before recording the slots it fired"
        assert not runs.filter(dispatched_at__isnull=True).exists(), "recorded, never published"
        assert client.llen(cluster.queue) == len(jobs)
    finally:
        cluster.stop_all()


def _queued(channel: Any, url: str, queue: str) -> tuple[Any, int]:
    """The messages waiting in ``queue`` on RabbitMQ (0 before the beats declared it), and the
    channel to ask on next time (a passive declare of a missing queue closes its channel)."""
    if channel is None or not channel.is_open:
        channel = kombu.Connection(url, connect_timeout=5).channel()
    try:
        _, messages, _ = channel.queue_declare(queue, passive=True)
    except amqp.exceptions.NotFound:
        return channel, 0
    return channel, int(messages)


def test_a_rabbitmq_killed_mid_burst_loses_no_run(cluster: Cluster, tmp_path: Path) -> None:
    """The RabbitMQ form of the test above, for the burst's confirm channel and its one write per
    chunk (``jobs.broker.amqp_frames``): 2,000 slots due at once from two beats into a RabbitMQ node
    of the test's own. Once part of the burst is queued, the beats are frozen mid-burst, the node's
    VM is killed (SIGKILL: whatever it had not written to disk is gone, and chunks handed over but
    not confirmed are in doubt), the beats go on against a dead broker for a second, and the node
    starts again on its data; only then a worker starts. Every run executes, once."""
    with private_rabbitmq_node() as node:
        assert node.process is not None
        try:
            log = tmp_path / "executions.log"
            jobs, slot = _burst_due_soon(cluster, node.amqp_url, log)

            channel: Any = None

            def part_queued() -> bool:
                nonlocal channel
                channel, count = _queued(channel, node.amqp_url, cluster.queue)
                return count >= 300

            wait_for(part_queued, 60, "part of the burst in RabbitMQ", poll=0.002)
            for name in BEATS:
                cluster.kill(name, signal.SIGSTOP)
            assert channel is not None
            channel, queued = _queued(channel, node.amqp_url, cluster.queue)
            assert queued < len(jobs), "the whole burst was out before the beats froze"
            channel.connection.close()
            node.process.kill()
            for name in BEATS:
                cluster.kill(name, signal.SIGCONT)
            time.sleep(1)  # the outage: the beats' next publishes meet no broker
            node.process.start()
            _a_worker_runs_each_once_some_re_published(cluster, jobs, log, slot)
        finally:
            cluster.stop_all()
