"""Exactly once on RabbitMQ: real beats and workers with CELERY_BROKER_URL=amqp://, a job defined
through the CLI, every slot run once; and the broker-side facts the design relies on: a durable
queue, persistent messages, late acknowledgement (a message is gone only once its run ended) and
a prefetch of one.

Each test gets its own virtual host when ``rabbitmqctl`` can create one (else the test's own
queue on the default vhost keeps it apart): ``rabbitmq_vhost`` in conftest.py, which the
``broker`` fixture shares (the exactly-once tests of test_beats_cluster.py run on both brokers).
``JOBS_TEST_AMQP_URL`` points elsewhere than the local server (default
``amqp://guest:guest@127.0.0.1:5672/``; without one, ``make test`` starts a private node).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import amqp
import pytest
from kombu import Connection

from jobs.models import JobRun, RunStatus, Trigger
from tests.acceptance.conftest import Cluster, has_rabbitmqctl, rabbitmqctl, wait_for

pytestmark = pytest.mark.acceptance


def _vhost(url: str) -> str:
    return Connection(url).virtual_host


def _queue_depth(url: str, queue: str) -> int:
    with Connection(url) as conn:
        channel: Any = conn.default_channel
        _name, messages, _consumers = channel.queue_declare(queue, passive=True)
        return int(messages)


def test_every_slot_runs_once_on_rabbitmq(cluster: Cluster, amqp_url: str, tmp_path: Path) -> None:
    cluster.use_broker(amqp_url)
    cluster.env.update(JOBS_LOG_FORMAT="json")
    log = tmp_path / "executions.log"
    # Overlap "wait": the manual run may reach a worker while a scheduled one holds the job's
    # lease (the workers start with it waiting in the queue), and it is to run, not be skipped.
    added = cluster.manage(
        "jobs", "add", "tick", "--task", "tests.record", "--every", "1s", "--overlap", "wait",
        "--kwargs", json.dumps({"log": str(log)}), "--queue", cluster.queue,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr

    # Before any worker runs: a manual run's message waits in the queue. Look at it there.
    triggered = cluster.manage("jobs", "run", "tick")
    assert triggered.returncode == 0, triggered.stderr
    manual_id = int(triggered.stdout.strip())
    with Connection(amqp_url) as conn:
        channel: Any = conn.default_channel
        message = channel.basic_get(cluster.queue, no_ack=False)
        assert message is not None, "the run's message is not in its queue"
        assert message.properties["delivery_mode"] == 2, "the message is not persistent"
        assert message.headers["id"] == f"jobrun-{manual_id}"
        channel.basic_reject(message.delivery_tag, requeue=True)
        # Declaring the same queue as transient is refused: it exists, and it is durable.
        with pytest.raises(amqp.exceptions.PreconditionFailed):
            channel.queue_declare(cluster.queue, durable=False)

    for name in ("node-a", "node-b"):
        cluster.start_worker(name, concurrency=1)
    for name in ("beat-1", "beat-2"):
        cluster.start_beat(name)

    def done() -> bool:
        scheduled = JobRun.objects.filter(
            job__name="tick", trigger=Trigger.SCHEDULED, status=RunStatus.SUCCEEDED
        )
        manual = JobRun.objects.filter(pk=manual_id, status=RunStatus.SUCCEEDED)
        return scheduled.count() >= 3 and manual.exists()

    wait_for(done, timeout=90, what="3 scheduled runs and the manual one, succeeded")

    runs = list(JobRun.objects.filter(job__name="tick", trigger=Trigger.SCHEDULED))
    slots = [run.scheduled_for for run in runs]
    assert len(slots) == len(set(slots)), "a slot has two runs"
    executed = [line.split()[0] for line in log.read_text().splitlines()]
    assert len(executed) == len(set(executed)), "a run executed twice"
    succeeded = {str(run.pk) for run in runs if run.status == RunStatus.SUCCEEDED}
    assert succeeded | {str(manual_id)} <= set(executed)

    if has_rabbitmqctl():
        consumers = rabbitmqctl(
            "list_consumers", "-p", _vhost(amqp_url), "queue_name", "channel_pid", "ack_required"
        ).stdout
        ours = [line.split("\t") for line in consumers.splitlines() if cluster.queue in line]
        assert [row[2] for row in ours] == ["true", "true"], f"manual (late) acks: {consumers}"
        # Celery sets the prefetch on the channel (RabbitMQ's "global" QoS): one unacknowledged
        # message per worker process at a time.
        channels = rabbitmqctl("list_channels", "pid", "global_prefetch_count").stdout
        prefetch = dict(line.split("\t") for line in channels.splitlines() if "\t" in line)
        assert [prefetch[row[1]] for row in ours] == ["1", "1"], channels

    # Beats first: one stopped together with the workers may publish a last slot that no
    # worker is left to take. Then the workers finish what the beats published.
    for name in ("beat-1", "beat-2"):
        cluster.kill(name, signal.SIGTERM)
    for name in ("beat-1", "beat-2"):
        cluster.processes[name].wait(timeout=30)
    unfinished = JobRun.objects.filter(
        job__name="tick", status__in=[RunStatus.SCHEDULED, RunStatus.RUNNING]
    )
    wait_for(lambda: not unfinished.exists(), timeout=60, what="the last published runs, ended")
    cluster.stop_all()
    # Every message was acknowledged once its run ended: nothing is left to redeliver.
    assert _queue_depth(amqp_url, cluster.queue) == 0

    # JOBS_LOG_FORMAT=json: the workers' lines about runs are JSON objects naming the run.
    records = [
        json.loads(line)
        for name in ("node-a", "node-b")
        for line in cluster.log_of(name).splitlines()
        if line.startswith("{")
    ]
    finished = [r for r in records if r.get("logger") == "jobs.guard.runner" and "run_id" in r]
    assert finished, "no JSON line from the runner"
    assert all(record["node"].startswith(("node-a@", "node-b@")) for record in finished)
