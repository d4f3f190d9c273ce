"""Publishing a burst of runs at the broker's speed.

``celery.send_task`` costs about half a millisecond a message, most of it building the message
(routing, ``saferepr`` of the arguments, reading configuration) and one broker round trip. A
burst of thousands of slots pays that thousands of times for messages that differ only in the
run. Here Celery builds one message per job shape (task, queue, routing, priority, limits),
through ``send_task`` itself with the producer swapped for one that keeps the publish call
instead of making it; every run's message is that template with its own task id and keyword
arguments, handed to kombu's ``Producer.publish`` as Celery would hand it. So headers, body and
properties are the ones ``send_task`` makes (``tests/acceptance/test_bulk_publish.py`` compares
them), and workers, Flower and redelivery see nothing different.

What changes is the sending: on Redis kombu's publish batch puts a chunk's ``LPUSH`` es in one
pipeline (one round trip); on RabbitMQ the chunk goes out back to back on a channel in confirm
mode and the broker's acknowledgements are awaited once for all of them. Celery's
``before/after_task_publish`` signals fire once per template, not per message, and no
``task-sent`` events are sent (as for any burst: Flower shows each run once a worker receives
it).

A chunk whose sending fails leaves its runs ``scheduled``: maintenance re-publishes them, and
a message that did arrive twice is a no-op at the claim.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from celery import current_app
from celery.utils.saferepr import saferepr
from kombu import Producer

from jobs import registry
from jobs.models import Job

log = logging.getLogger(__name__)

# The job fields its message is made of besides the task and the display name: jobs alike in
# these (and in the task) share one template.
_SHAPE_FIELDS = ("queue", "priority", "exchange", "routing_key", "time_limit")

# How long RabbitMQ may take to confirm a chunk before its delivery counts as uncertain.
CONFIRM_TIMEOUT = 30.0


@dataclass(frozen=True)
class Publication:
    """One run's message to send: the job, the run, its slot."""

    job: Job
    run_id: int
    scheduled_for: datetime


class _KeepingProducer:
    """Stands in for the producer in ``send_task``: keeps the publish call instead of making it."""

    def __init__(self, producer: Any) -> None:
        self.connection = producer.connection
        self.body: Any = None
        self.publish_kwargs: dict[str, Any] = {}

    def publish(self, body: Any, **kwargs: Any) -> None:
        self.body = body
        self.publish_kwargs = kwargs


@dataclass
class _Template:
    """A message Celery built, and where in it the run's own values go."""

    body: tuple[Any, dict[str, Any], Any]
    publish_kwargs: dict[str, Any]
    headers: dict[str, Any]
    task_id_headers: tuple[str, ...]
    task_id_kwargs: tuple[str, ...]
    declare: list[Any]
    # Whether ``_kwargs_repr`` made the sample's ``kwargsrepr`` as Celery did.
    composed_repr: bool

    def publish(self, producer: Any, task_id: str, kwargs: dict[str, Any], job: str) -> None:
        headers = dict(self.headers)
        for key in self.task_id_headers:
            headers[key] = task_id
        if headers.get("shadow") is not None:
            headers["shadow"] = job
        headers["kwargsrepr"] = (
            _kwargs_repr(kwargs) if self.composed_repr else saferepr(kwargs, _repr_limit())
        )
        publish_kwargs = dict(self.publish_kwargs)
        for key in self.task_id_kwargs:
            publish_kwargs[key] = task_id
        publish_kwargs["headers"] = headers
        args, _, embed = self.body
        producer.publish((args, kwargs, embed), **publish_kwargs)


def _repr_limit() -> int:
    return int(current_app.amqp.kwargsrepr_maxsize)


@lru_cache(maxsize=65_536)
def _str_repr(text: str) -> str:
    return saferepr(text, _repr_limit())


def _kwargs_repr(kwargs: dict[str, Any]) -> str:
    """Celery's ``saferepr`` of a run's keyword arguments, a quarter of a burst's cost when
    made whole: composed from the (cached) reprs of the job name and the slot. Equal to it while
    the whole is shorter than the limit (a job name is at most 200 characters); each template
    checks it against ``saferepr`` on its sample and uses ``saferepr`` if they differ."""
    return "{'run_id': %d, 'job': %s, 'slot': %s}" % (  # noqa: UP031  (mirrors the dict's repr)
        kwargs["run_id"],
        _str_repr(kwargs["job"]),
        _str_repr(kwargs["slot"]),
    )


def _run_kwargs(run: Publication) -> dict[str, Any]:
    from jobs.dispatch import message_kwargs

    return message_kwargs(run.job, run.run_id, run.scheduled_for)


def _template(sample: Publication, producer: Any) -> _Template:
    """Celery's own message for ``sample``'s run, through ``dispatch.publish``."""
    from jobs.dispatch import publish, task_id_for

    keeping = _KeepingProducer(producer)
    publish(sample.job, sample.run_id, sample.scheduled_for, producer=keeping, sent_event=False)
    task_id = task_id_for(sample.run_id)
    publish_kwargs = dict(keeping.publish_kwargs)
    headers = dict(publish_kwargs.pop("headers") or {})
    declare = list(publish_kwargs.get("declare") or [])
    # Declared once per burst by ``publish_burst``, not once per message; each message's own
    # publish retries nothing (a failed chunk is maintenance's to re-publish), so kombu wraps
    # no retry around it.
    publish_kwargs.update(declare=[], retry=False)
    return _Template(
        composed_repr=headers.get("kwargsrepr") == _kwargs_repr(_run_kwargs(sample)),
        body=keeping.body,
        publish_kwargs=publish_kwargs,
        headers=headers,
        task_id_headers=tuple(key for key, value in headers.items() if value == task_id),
        task_id_kwargs=tuple(key for key, value in publish_kwargs.items() if value == task_id),
        declare=declare,
    )


def _shape(job: Job) -> tuple[Any, ...]:
    # The task a message names, and whether it carries the job's name as Celery's display name
    # (``shadow``, see ``dispatch.publish``): the one header that differs between such jobs.
    message_task = registry.get(job.task).message_task
    return (message_task, job.name != message_task, *(getattr(job, f) for f in _SHAPE_FIELDS))


def _transport(producer: Any) -> str:
    return str(producer.connection.transport.driver_type)


@contextmanager
def _sending(producer: Any, size: int) -> Iterator[Any]:
    """A producer whose publishes go out together when the block ends: a pipelined batch on
    Redis, a confirmed batch on RabbitMQ, one by one elsewhere."""
    driver = _transport(producer)
    if driver == "redis" and producer.supports_batch_publish:
        with producer.batch(max_size=max(size, 1)):
            yield producer
    elif driver == "amqp":
        with _confirmed(producer) as confirmed:
            yield confirmed
    else:
        yield producer


@contextmanager
def _confirmed(producer: Any) -> Iterator[Any]:
    """A producer on a channel of its own in confirm mode; when the block ends, every message
    published through it has been acknowledged by RabbitMQ (a nack or a timeout raises)."""
    from amqp import spec

    channel = producer.connection.channel()
    try:
        channel.confirm_select()
        outstanding: set[int] = set()
        nacked: list[int] = []
        published = 0

        def on_ack(tag: int, multiple: bool) -> None:
            if multiple:
                outstanding.difference_update({t for t in outstanding if t <= tag})
            else:
                outstanding.discard(tag)

        def on_nack(tag: int, multiple: bool) -> None:
            nacked.append(tag)
            on_ack(tag, multiple)

        channel.events["basic_ack"].add(on_ack)
        channel.events["basic_nack"].add(on_nack)

        class _Counting(Producer):
            def _publish(self, *args: Any, **kwargs: Any) -> Any:
                nonlocal published
                result = super()._publish(*args, **kwargs)
                published += 1
                outstanding.add(published)
                return result

        yield _Counting(channel, auto_declare=False)
        while outstanding:
            channel.wait([spec.Basic.Ack, spec.Basic.Nack], timeout=CONFIRM_TIMEOUT)
        if nacked:
            raise ConnectionError(f"RabbitMQ refused {len(nacked)} message(s) of the batch")
    finally:
        try:
            channel.close()
        except Exception:  # a broken connection: nothing left to close
            log.debug("closing the confirm channel failed", exc_info=True)


def publish_burst(runs: Sequence[Publication], producer: Any) -> int:
    """Publish ``runs`` (a chunk of a burst) in one batch; the number sent. A run whose message
    cannot be made is logged and left ``scheduled``; a batch that cannot be sent is logged and
    left whole to maintenance (its delivery is uncertain: some messages may have arrived)."""
    from jobs.dispatch import task_id_for

    templates: dict[tuple[Any, ...], _Template] = {}
    shapes = [_shape(run.job) for run in runs]
    buffered = 0
    try:
        for run, shape in zip(runs, shapes, strict=True):
            if shape not in templates:
                templates[shape] = template = _template(run, producer)
                for entity in template.declare:
                    producer.maybe_declare(entity)
        with _sending(producer, len(runs)) as sender:
            for run, shape in zip(runs, shapes, strict=True):
                kwargs = _run_kwargs(run)
                template = templates[shape]
                try:
                    template.publish(sender, task_id_for(run.run_id), kwargs, run.job.name)
                except Exception:
                    log.exception(
                        "publish failed; the run stays scheduled for maintenance to re-publish",
                        extra={"action": "publish_failed", "run_id": run.run_id},
                    )
                else:
                    buffered += 1
    except Exception:
        log.exception(
            "publishing a burst of %d run(s) failed; they stay scheduled for maintenance to "
            "re-publish",
            len(runs),
            extra={"action": "publish_failed", "run_ids": [run.run_id for run in runs][:100]},
        )
        return 0
    return buffered
