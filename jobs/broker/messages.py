"""A run's message: its task id, what it carries, how it is routed, and sending one. The broker is
only a doorbell: the run row is the truth (``jobs.broker.dispatch`` publishes runs, one or a
burst)."""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any

from celery import current_app

from jobs import registry
from jobs.models import CELERY_HEADERS, Job

_TASK_ID_PREFIX = "jobrun-"


def task_id_for(run_id: int) -> str:
    """Deterministic, so a republished message shows as the same task in Flower."""
    return f"{_TASK_ID_PREFIX}{run_id}"


def run_id_of(task_id: str | None) -> int | None:
    """The run a task id was made for by ``task_id_for``; ``None`` for any other task."""
    digits = (task_id or "").removeprefix(_TASK_ID_PREFIX)
    if digits == task_id or not digits.isascii() or not digits.isdigit():
        return None
    return int(digits)


class _SentEventAs:
    """An event dispatcher that sends Celery's ``task-sent`` event under a display name: Celery
    gives it the task's own name even when the message has a ``shadow``, and Flower takes the
    name of whichever of ``task-sent`` and ``task-received`` reaches it last."""

    def __init__(self, name: str) -> None:
        self.name = name

    def publish(self, type: str, fields: dict[str, Any], producer: Any, **options: Any) -> None:
        _event_publisher(current_app.amqp).publish(
            type, {**fields, "name": self.name}, producer, **options
        )


@cache
def _event_publisher(amqp: Any) -> Any:
    """One per Celery app (made in about 1 ms). As Celery's own publisher of ``task-sent``: not
    enabled, since it publishes with the message's producer."""
    return amqp.app.events.Dispatcher(enabled=False)


# Redis (kombu) takes the lowest number first, RabbitMQ the highest: a job's priority means the
# same on both (9 the most urgent) when it goes out reversed to Redis.
_REDIS_SCHEMES = ("redis", "rediss", "sentinel")


@cache
def _reversed_priorities(broker_url: str) -> bool:
    return broker_url.split(":", 1)[0].lower() in _REDIS_SCHEMES


def wire_priority(priority: int) -> int:
    """The message priority that makes ``priority`` (0-9, 9 first) mean the same on the broker."""
    if _reversed_priorities(str(current_app.conf.broker_url)):
        return 9 - priority
    return priority


def message_kwargs(job: Job, run_id: int, scheduled_for: datetime) -> dict[str, Any]:
    """What a run's message asks of the worker (``jobs.guard.runner`` reads it)."""
    return {"run_id": run_id, "job": job.name, "slot": scheduled_for.isoformat()}


def message_headers(job: Job) -> dict[str, Any]:
    """The custom headers of a run's message: the job's, and for an adopted job the
    ``periodic_task_name`` that django-celery-beat adds to every message of its row (tasks read
    it; the row keeps the job's name)."""
    # A row written around validation never replaces Celery's own headers (models.validate_headers).
    headers = job.headers if isinstance(job.headers, dict) else {}
    headers = {key: value for key, value in headers.items() if key not in CELERY_HEADERS}
    if job.adopted:
        headers["periodic_task_name"] = job.name
    return headers


def publish(
    job: Job,
    run_id: int,
    scheduled_for: datetime,
    producer: object = None,
    *,
    eta: datetime | None = None,
    headers: dict[str, Any] | None = None,
) -> None:
    """Send the message that asks a worker to execute run ``run_id`` of ``job``; with ``eta``
    (a retry's backoff) the worker holds it until then; ``headers``: this message's own, beside
    the job's (``jobs.observers.beat_headers``)."""
    options: dict[str, Any] = {"queue": job.queue, "task_id": task_id_for(run_id)}
    # A plain Celery task's own task must never get a run's message (it would run unguarded,
    # with these arguments): its runs go to registry.RUN_TASK, which calls it under the guard.
    message_task = registry.get(job.task).message_task
    if job.name != message_task:
        # Celery's display name for the task (logs, events, so Flower): the job, not only the
        # task the message names, which is what the worker runs.
        options["shadow"] = job.name
        options["event_dispatcher"] = _SentEventAs(job.name)
    if job.priority is not None:
        options["priority"] = wire_priority(job.priority)
    # An adopted django-celery-beat entry's routing (jobs.beat.adoption); blank: the queue's own.
    if job.exchange:
        options["exchange"] = job.exchange
    if job.routing_key:
        options["routing_key"] = job.routing_key
    headers = {**message_headers(job), **(headers or {})}
    if headers:
        options["headers"] = headers
    # As django-celery-beat sends an expiring row's messages: a worker drops one that arrives
    # too late (maintenance then records its run missed).
    if job.expires_at is not None:
        options["expires"] = job.expires_at
    # The soft limit is the runner's (jobs.guard.lease_keeper sets ctx.stopping and the run
    # records it), not Celery's, which would raise inside the job (or inside the fenced finish).
    # The hard limit is Celery's: the pool kills the process, and jobs.guard.hard_limit records
    # the run failed.
    if job.time_limit is not None:
        options["time_limit"] = job.time_limit
    if producer is not None:
        options["producer"] = producer
    if eta is not None:
        options["eta"] = eta
    current_app.send_task(
        message_task,
        kwargs=message_kwargs(job, run_id, scheduled_for),
        **options,
    )
