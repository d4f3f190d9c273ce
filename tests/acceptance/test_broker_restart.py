"""A Redis restart while a worker holds unacknowledged messages: the worker stays up.

With kombu 5.7 / Celery 5.7 a worker that lost its Redis while executing runs (``acks_late``: their
messages unacknowledged) with prefetch credit left (so a ``BRPOP`` in flight) died of
``Unrecoverable error: AttributeError("'NoneType' object has no attribute 'hostname'")`` when it saw
the loss first on another of its connections: every worker of a fleet at the same moment (found by
the nemesis, ``docs/nemesis.md``; the cause and the defence: ``jobs.broker.broker_restart``).

A real worker against a Redis of the test's own, killed (SIGKILL: it keeps nothing on disk, so
it comes back empty) and started again on the same port while the worker executes two runs it
has not acknowledged, one ending while Redis is down, the other after it is back.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from celery import current_app
from django.utils import timezone

from jobs.audit import Actor
from jobs.broker.messages import publish
from jobs.models import TERMINAL_STATUSES, Job, JobRun, RunStatus, Trigger
from jobs.schedule.kinds import Every
from jobs.services import JobDefinition, create_job
from tests.acceptance.conftest import Cluster, wait_for
from tests.support.private_redis import PrivateRedis

pytestmark = pytest.mark.acceptance

START_TIMEOUT = 90  # a worker starting on a small, shared machine
SETTLE = 60  # a worker reconnecting, runs ending, on that machine


def _job(cluster: Cluster, name: str, task: str, **kwargs: str) -> Job:
    return create_job(
        JobDefinition(
            name=name,
            task=task,
            schedule=Every(3600),  # no beat runs here: only the runs the test sends
            kwargs=kwargs,
            policies={"queue": cluster.queue, "lease_ttl": 120},
        ),
        actor=Actor.code("tests"),
    )


def _send(broker_url: str, job: Job) -> JobRun:
    """A run of ``job`` now, its message sent to ``broker_url`` (the test process's own Celery
    app points at the suite's broker, not the test's Redis)."""
    run = JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.MANUAL)
    with current_app.connection_for_write(broker_url) as conn:
        publish(job, run.pk, run.scheduled_for, producer=conn.Producer())
    return run


def test_a_worker_holding_unacknowledged_messages_survives_a_redis_restart(
    cluster: Cluster, private_redis: PrivateRedis, tmp_path: Path
) -> None:
    cluster.use_broker(private_redis.url)
    # Three processes for two held runs: prefetch credit is left, so a BRPOP is in flight.
    worker = cluster.start_worker("worker", concurrency=3)

    def alive() -> bool:
        text = cluster.log_of("worker")
        assert worker.poll() is None and "Unrecoverable error" not in text, (
            f"the worker failed (exit code {worker.poll()}):\n{text[-6000:]}"
        )
        return True

    wait_for(
        lambda: alive() and " ready." in cluster.log_of("worker"),
        START_TIMEOUT,
        "the worker ready",
        poll=0.5,
    )
    log = tmp_path / "executions.log"
    holds = [tmp_path / f"hold-{n}" for n in (1, 2)]
    for hold in holds:
        hold.touch()
    held_jobs = [
        _job(cluster, f"held-{n}", "tests.hold", log=str(log), hold=str(hold))
        for n, hold in enumerate(holds, 1)
    ]
    ids = [_send(private_redis.url, job).pk for job in held_jobs]
    # Both executing: their messages delivered to the worker and not acknowledged (acks_late).
    running = JobRun.objects.filter(pk__in=ids, status=RunStatus.RUNNING)
    wait_for(lambda: alive() and running.count() == 2, SETTLE, "both held runs running")

    # Redis dies. The worker sees it first on its remote-control (pub/sub) connection, as when
    # Redis exits and closes its connections in the order they came (dropping that connection
    # a moment earlier makes the order certain): its BRPOP is then still in flight.
    assert private_redis.drop_pubsub_connections() >= 1
    private_redis.kill()
    wait_for(
        lambda: alive() and "Cannot connect to redis://" in cluster.log_of("worker"),
        SETTLE,
        "the worker failing to reconnect",
    )
    # One run ends while Redis is down: its acknowledgement has no broker to go to.
    holds[0].unlink()
    first = JobRun.objects.filter(pk=ids[0], status__in=TERMINAL_STATUSES)
    wait_for(lambda: alive() and first.exists(), SETTLE, "a held run ending while Redis is down")

    private_redis.start()  # empty, on the same port
    wait_for(
        lambda: alive() and cluster.log_of("worker").count("Connected to redis://") >= 2,
        SETTLE,
        "the worker connected to the restarted Redis",
    )
    # The other ends after: nothing the worker held is lost.
    holds[1].unlink()
    ended = JobRun.objects.filter(pk__in=ids, status__in=TERMINAL_STATUSES)
    wait_for(lambda: alive() and ended.count() == 2, SETTLE, "the held runs ended")
    statuses = set(JobRun.objects.filter(pk__in=ids).values_list("status", flat=True))
    assert statuses == {RunStatus.SUCCEEDED}

    # And the worker goes on consuming: a run sent after the restart runs.
    after = _send(private_redis.url, _job(cluster, "after", "tests.record", log=str(log)))
    done = JobRun.objects.filter(pk=after.pk, status=RunStatus.SUCCEEDED)
    wait_for(lambda: alive() and done.exists(), SETTLE, "the run sent after the restart")

    assert alive()
    executed = [int(line.split()[0]) for line in log.read_text().splitlines() if line]
    assert sorted(executed) == sorted([*ids, after.pk]), "each run executed once"
