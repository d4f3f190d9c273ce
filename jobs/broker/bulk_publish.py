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
pipeline (one round trip); on RabbitMQ a burst's chunks go out back to back on one channel in
confirm mode, each chunk's frames in one write (``jobs.broker.amqp_frames``), and a chunk's
acknowledgements are awaited once for all of it, when the next chunk is handed over
(``Burst``): the broker confirms one chunk while the beat inserts the next. Celery's
``before/after_task_publish`` signals fire once per template, not per message. Each run's
``task-sent`` event (when ``task_send_sent_event`` is on, as Celery sends it) is made the same
way, from the event Celery made for the template's run; a chunk's events go out together as one
message in Celery's own form for a batch of events (``task.multi``, a list, as a worker's
buffered events), in the chunk's pipeline or write: Flower, ``celery events`` and exporters
count a burst's runs as any others.

A chunk whose sending fails, or whose acknowledgements do not all come, leaves its runs
``scheduled``: maintenance re-publishes them, and a message that did arrive twice is a no-op at
the claim.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

import kombu.serialization
from celery import current_app
from celery.utils.saferepr import saferepr
from kombu import Producer
from kombu.utils import json as kombu_json

from jobs import observers, registry
from jobs.broker.amqp_frames import BufferedPublishing, MessageFrames
from jobs.broker.messages import message_headers, message_kwargs, publish, task_id_for
from jobs.models import Job

log = logging.getLogger(__name__)

# The job fields its message is made of besides the task and the display name: jobs alike in
# these (and in the task) share one template.
_SHAPE_FIELDS = ("queue", "priority", "exchange", "routing_key", "time_limit", "expires_at")

# How long RabbitMQ may take to confirm a chunk before its delivery counts as uncertain.
CONFIRM_TIMEOUT = 30.0

# RabbitMQ chunks framed by jobs.broker.amqp_frames; off, kombu's own publish on the same confirm
# channel and chunking (bench/burst_bench.py measures one against the other).
AMQP_FRAMES = True


@dataclass(frozen=True)
class Publication:
    """One run's message to send: the job, the run, its slot."""

    job: Job
    run_id: int
    scheduled_for: datetime


class _KeepingProducer:
    """Stands in for the producer in ``send_task``: keeps the publish calls (the message, then
    its ``task-sent`` event) instead of making them."""

    def __init__(self, producer: Any) -> None:
        self.connection = producer.connection
        self.kept: list[tuple[Any, dict[str, Any]]] = []

    def publish(self, body: Any, **kwargs: Any) -> None:
        self.kept.append((body, kwargs))


class _SentEvent:
    """Celery's ``task-sent`` event for a template's runs: the event Celery made for the sample
    run, with the run's own task id, arguments' repr and display name, and the time and logical
    clock of its sending."""

    def __init__(self, fields: dict[str, Any], publish_kwargs: dict[str, Any], task_id: str):
        self.fields = fields
        self.task_id_keys = tuple(key for key, value in fields.items() if value == task_id)
        self.declare = list(publish_kwargs.get("declare") or [])
        self.publish_kwargs = {**publish_kwargs, "declare": [], "retry": False}
        # The body's JSON text around the values a run fills, when composing it makes kombu's
        # (else None: kombu serializes each), and the publish options that send it as is.
        self._pieces = self._compose(fields) if publish_kwargs.get("serializer") == "json" else None
        self._composed_kwargs = {
            **{k: v for k, v in self.publish_kwargs.items() if k != "serializer"},
            "content_type": "application/json",
            "content_encoding": "utf-8",
        }

    def _compose(self, sample: dict[str, Any]) -> list[str] | None:
        """The pieces of kombu's JSON text of an event like ``sample`` between the values a run
        fills (their keys, at the odd places), if composing them makes kombu's text."""
        open_keys = {*self.task_id_keys, "kwargs", "name", "timestamp", "clock"}
        marked = {k: (f"\x00{k}\x00" if k in open_keys else v) for k, v in sample.items()}
        pieces = re.split(r'"\\u0000(\w+)\\u0000"', kombu_json.dumps(marked))
        self._pieces = pieces
        probe = {**sample, "name": 'ü "q" \\ \n', "clock": 7, "timestamp": 1.5e9 + 0.125}
        if all(self.body_text(event) == kombu_json.dumps(event) for event in (sample, probe)):
            return pieces
        return None

    def event(self, task_id: str, kwargs_repr: str, job: str, shadowed: bool) -> dict[str, Any]:
        event = dict(self.fields)
        for key in self.task_id_keys:
            event[key] = task_id
        event["kwargs"] = kwargs_repr
        if shadowed:
            event["name"] = job
        event["timestamp"] = time.time()
        event["clock"] = current_app.clock.forward()  # type: ignore[attr-defined]  # as Celery's
        return event

    def body_text(self, event: dict[str, Any]) -> str:
        """kombu's JSON text of ``event``, composed (``_compose``)."""
        assert self._pieces is not None
        pieces = self._pieces
        out = [pieces[0]]
        for n in range(1, len(pieces), 2):
            out.append(_json_value(event[pieces[n]]))
            out.append(pieces[n + 1])
        return "".join(out)

    def publish_batch(self, producer: Any, events: list[tuple[_SentEvent, dict[str, Any]]]) -> None:
        """Send ``events`` (each with the ``_SentEvent`` that made it) in one message, as
        Celery's dispatcher sends a buffered group: a list, routed ``<group>.multi``. A single
        message per chunk: an event sent alone costs as much as the run's message."""
        routing_key = "task.multi"
        if all(sent._pieces is not None for sent, _ in events):
            text = "[" + ", ".join(sent.body_text(event) for sent, event in events) + "]"
            producer.publish(text, **{**self._composed_kwargs, "routing_key": routing_key})
        else:
            batch = [event for _, event in events]
            producer.publish(batch, **{**self.publish_kwargs, "routing_key": routing_key})


def _json_value(value: Any) -> str:
    # As json.dumps writes a str, an int or a float (their repr); anything else whole.
    kind = type(value)
    if kind is str:
        return _json_string(value)
    if kind is int or kind is float:
        return repr(value)
    return kombu_json.dumps(value)


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
    # The body's JSON text around the run's keyword arguments, when ``_composed_body`` makes
    # the body kombu serializes (else None: kombu serializes each).
    body_around: tuple[str, str] | None = None
    # Celery's task-sent event for these messages; None when Celery sends none.
    sent_event: _SentEvent | None = None
    # The sample run's task id, and whether its message carries trace context (a tracing
    # tool's, jobs.observers), made again for every other run's message.
    sample_task_id: str = ""
    traced: bool = False

    def trace(
        self, task_id: str, job: Job, schedule_of: observers.ScheduleOf | None
    ) -> dict[str, Any]:
        """The trace headers of run ``task_id``'s message (None: a header it has none of): the
        sample's are its own."""
        if not self.traced or task_id == self.sample_task_id:
            return {}
        schedule = schedule_of(job) if schedule_of is not None else None
        task = str(self.headers.get("task", ""))
        return observers.fresh_trace(self.headers, task, task_id, job.name, schedule)

    def event(self, task_id: str, kwargs: dict[str, Any], job: str) -> dict[str, Any] | None:
        """The run's ``task-sent`` event, if Celery sends one."""
        if self.sent_event is None:
            return None
        shadowed = self.headers.get("shadow") is not None
        return self.sent_event.event(task_id, self.kwargs_repr(kwargs), job, shadowed)

    def publish(
        self, producer: Any, task_id: str, kwargs: dict[str, Any], job: str,
        trace: dict[str, Any],
    ) -> None:  # fmt: skip
        headers = dict(self.headers)
        for key in self.task_id_headers:
            headers[key] = task_id
        if headers.get("shadow") is not None:
            headers["shadow"] = job
        headers["kwargsrepr"] = self.kwargs_repr(kwargs)
        headers.update(trace)
        for key in [key for key, value in trace.items() if value is None]:
            del headers[key]  # a template's header this run's message has none of
        publish_kwargs = dict(self.publish_kwargs)
        for key in self.task_id_kwargs:
            publish_kwargs[key] = task_id
        publish_kwargs["headers"] = headers
        args, _, embed = self.body
        producer.publish((args, kwargs, embed), **publish_kwargs)

    def kwargs_repr(self, kwargs: dict[str, Any]) -> str:
        return _kwargs_repr(kwargs) if self.composed_repr else saferepr(kwargs, _repr_limit())

    def open_values(
        self, task_id: str, kwargs: dict[str, Any], job: str, trace: dict[str, Any]
    ) -> dict[str, str]:
        """What a run fills in the compiled frames' open fields (``_Confirms._compile``)."""
        values = {"task_id": task_id, "kwargsrepr": self.kwargs_repr(kwargs), "job": job}
        if self.traced:
            values.update({key: trace.get(key, self.headers[key]) for key in self.open_trace})
        return values

    @property
    def open_trace(self) -> tuple[str, ...]:
        """The headers a run's trace context fills (``observers.TRACE_HEADERS``, and the inner
        headers Sentry's integration also writes them to)."""
        return tuple(key for key in (*observers.TRACE_HEADERS, "headers") if key in self.headers)

    def body_bytes(self, kwargs: dict[str, Any], encoding: str) -> bytes:
        """The message body kombu's publish serializes, encoded as py-amqp sends it."""
        if self.body_around is not None:
            return _composed_body(self.body_around, kwargs).encode(encoding)
        return self._serialized(kwargs, encoding)

    def _serialized(self, kwargs: dict[str, Any], encoding: str) -> bytes:
        args, _, embed = self.body
        serializer = self.publish_kwargs.get("serializer")
        _, _, payload = kombu.serialization.dumps((args, kwargs, embed), serializer=serializer)
        return payload.encode(encoding) if isinstance(payload, str) else payload

    def compose_body(self, sample: dict[str, Any]) -> None:
        """Compose bodies from now on if that makes kombu's body for ``sample`` and for a
        probe whose strings JSON must escape (a JSON serializer with other settings than
        kombu's, or another serializer, leaves each body to kombu)."""
        if self.publish_kwargs.get("serializer") != "json":
            return
        args, _, embed = self.body
        around = (f"[{json.dumps(args)}, ", f", {json.dumps(embed)}]")
        probe = {**sample, "job": 'ü "q" \\ \n \u2028 é'}
        if all(
            _composed_body(around, kwargs).encode() == self._serialized(kwargs, "utf-8")
            for kwargs in (sample, probe)
        ):
            self.body_around = around


def _repr_limit() -> int:
    return int(current_app.amqp.kwargsrepr_maxsize)


# json.dumps' own string encoder (ensure_ascii, its default and kombu's).
_json_string = json.encoder.encode_basestring_ascii


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


def _composed_body(around: tuple[str, str], kwargs: dict[str, Any]) -> str:
    """kombu's JSON of a message body (``json.dumps`` of args, kwargs, embed) made from the
    text around the keyword arguments: a sixth of a RabbitMQ burst's tick when kombu
    serializes each whole (its registry, a new encoder object per call)."""
    return '%s{"run_id": %d, "job": %s, "slot": %s}%s' % (  # noqa: UP031  (as _kwargs_repr)
        around[0],
        kwargs["run_id"],
        _json_string(kwargs["job"]),
        _json_string(kwargs["slot"]),
        around[1],
    )


def _run_kwargs(run: Publication) -> dict[str, Any]:
    return message_kwargs(run.job, run.run_id, run.scheduled_for)


def _template(sample: Publication, producer: Any, headers: dict[str, Any]) -> _Template:
    """Celery's own message for ``sample``'s run, through ``messages.publish`` (``headers``:
    the beat's for it, ``observers.beat_headers``)."""
    keeping = _KeepingProducer(producer)
    publish(sample.job, sample.run_id, sample.scheduled_for, producer=keeping, headers=headers)
    task_id = task_id_for(sample.run_id)
    (body, publish_kwargs), *event = keeping.kept
    publish_kwargs = dict(publish_kwargs)
    headers = dict(publish_kwargs.pop("headers") or {})
    declare = list(publish_kwargs.get("declare") or [])
    # Declared once per burst by ``publish_burst``, not once per message; each message's own
    # publish retries nothing (a failed chunk is maintenance's to re-publish), so kombu wraps
    # no retry around it.
    publish_kwargs.update(declare=[], retry=False)
    template = _Template(
        composed_repr=headers.get("kwargsrepr") == _kwargs_repr(_run_kwargs(sample)),
        body=body,
        publish_kwargs=publish_kwargs,
        headers=headers,
        task_id_headers=tuple(key for key, value in headers.items() if value == task_id),
        task_id_kwargs=tuple(key for key, value in publish_kwargs.items() if value == task_id),
        declare=declare,
        sent_event=_SentEvent(dict(event[0][0]), event[0][1], task_id) if event else None,
        sample_task_id=task_id,
        traced=observers.traced(headers),
    )
    if template.sent_event is not None:
        template.declare += template.sent_event.declare
    template.compose_body(_run_kwargs(sample))
    return template


def shape_of(job: Job) -> tuple[Any, ...]:
    """What a job's messages are made of but the run: jobs alike in it share one template."""
    # The task a message names, and whether it carries the job's name as Celery's display name
    # (``shadow``, see ``messages.publish``): the one header that differs between such jobs. A
    # job's custom headers are part of its template (an adopted job's name among them).
    message_task = registry.get(job.task).message_task
    headers = message_headers(job)
    return (
        message_task,
        job.name != message_task,
        json.dumps(headers, sort_keys=True) if headers else "",
        *(getattr(job, f) for f in _SHAPE_FIELDS),
    )


def family(shape: tuple[Any, ...]) -> tuple[Any, ...]:
    """A shape but its job's own headers: jobs of one family are published alike (adopted rows
    differ in their ``periodic_task_name`` header, so each has its own shape)."""
    return shape[:2] + shape[3:]


def _transport(producer: Any) -> str:
    return str(producer.connection.transport.driver_type)


class _Confirms:
    """A channel of its own in confirm mode, and the chunks published on it whose confirms
    RabbitMQ still owes: the delivery tag each chunk ended at, awaited when asked."""

    def __init__(self, connection: Any) -> None:
        self.channel = connection.channel()
        self.channel.confirm_select()
        # A chunk's messages framed into one write (jobs.broker.amqp_frames), or written one by one
        # by py-amqp as kombu publishes them.
        self.publishing = BufferedPublishing(self.channel) if AMQP_FRAMES else None
        self.published = 0
        self.outstanding: set[int] = set()
        self.nacked: set[int] = set()
        self.channel.events["basic_ack"].add(self._on_ack)
        self.channel.events["basic_nack"].add(self._on_nack)
        confirms = self

        class _Counting(Producer):
            def _publish(self, *args: Any, **kwargs: Any) -> Any:
                result = super()._publish(*args, **kwargs)
                confirms.published += 1
                confirms.outstanding.add(confirms.published)
                return result

        self.producer = _Counting(self.channel, auto_declare=False)
        # Each shape's messages compiled to frames (jobs.broker.amqp_frames.MessageFrames), or None
        # where they could not be: those go through kombu's publish.
        self._compiled: dict[tuple[Any, ...], MessageFrames | None] = {}

    def send(
        self, shape: tuple[Any, ...], template: _Template, task_id: str,
        kwargs: dict[str, Any], job: str, trace: dict[str, Any],
    ) -> None:  # fmt: skip
        """Buffer one run's message, until ``flush``."""
        if self.publishing is None:
            template.publish(self.producer, task_id, kwargs, job, trace)
            return
        if shape in self._compiled:
            compiled = self._compiled[shape]
        else:
            compiled = self._compiled[shape] = self._compile(template, task_id, kwargs, job, trace)
        if compiled is None:
            template.publish(self.producer, task_id, kwargs, job, trace)
            return
        body = template.body_bytes(kwargs, compiled.encoding)
        values = template.open_values(task_id, kwargs, job, trace)
        self.publishing.add(compiled.frames(body, values))
        self._buffered()

    def _buffered(self) -> None:
        self.published += 1
        self.outstanding.add(self.published)

    def flush(self) -> None:
        """Write the buffered messages (kombu's publish wrote each one already)."""
        if self.publishing is not None:
            self.publishing.flush()

    def _compile(
        self, template: _Template, task_id: str, kwargs: dict[str, Any], job: str,
        trace: dict[str, Any],
    ) -> MessageFrames | None:  # fmt: skip
        """The frames of ``template``'s messages, compiled from the message kombu makes for
        this run; None when kombu's message is not the template's with the run's values in
        the open fields and its body (a body serialized otherwise, compression...)."""
        assert self.publishing is not None  # send compiles only with jobs.broker.amqp_frames on
        plain = Producer(self.channel, auto_declare=False)
        message, arguments = self.publishing.capture(
            lambda: template.publish(plain, task_id, kwargs, job, trace)
        )
        properties = message.properties
        headers = properties.get("application_headers") or {}
        open_properties = {
            name: "task_id" for name, value in properties.items()
            if name != "application_headers" and value == task_id
        }  # fmt: skip
        open_headers = {key: "task_id" for key, value in headers.items() if value == task_id}
        open_headers["kwargsrepr"] = "kwargsrepr"
        if headers.get("shadow") is not None:
            open_headers["shadow"] = "job"
        # A run's own trace context (none but text compiles: Sentry's are sent by kombu).
        open_headers.update((key, key) for key in template.open_trace)
        encoding = properties.get("content_encoding") or "utf-8"
        return MessageFrames.compile(
            message, channel_id=self.publishing.channel_id, frame_max=self.publishing.frame_max,
            arguments=arguments, open_properties=open_properties, open_headers=open_headers,
            values=template.open_values(task_id, kwargs, job, trace),
            body=template.body_bytes(kwargs, encoding),
        )  # fmt: skip

    def _on_ack(self, tag: int, multiple: bool) -> None:
        if multiple:
            self.outstanding.difference_update([t for t in self.outstanding if t <= tag])
        else:
            self.outstanding.discard(tag)

    def _on_nack(self, tag: int, multiple: bool) -> None:
        if multiple:
            self.nacked.update(t for t in self.outstanding if t <= tag)
        else:
            self.nacked.add(tag)
        self._on_ack(tag, multiple)

    def await_through(self, first: int, last: int) -> None:
        """Return once RabbitMQ has acknowledged every message tagged ``first`` to ``last``;
        a nack among them or a ``CONFIRM_TIMEOUT`` without progress raises."""
        from amqp import spec

        while any(tag <= last for tag in self.outstanding):
            self.channel.wait([spec.Basic.Ack, spec.Basic.Nack], timeout=CONFIRM_TIMEOUT)
        refused = sum(1 for tag in self.nacked if first <= tag <= last)
        self.nacked = {tag for tag in self.nacked if tag > last}
        if refused:
            raise ConnectionError(f"RabbitMQ refused {refused} message(s) of the chunk")

    def close(self) -> None:
        try:
            self.channel.close()
        except Exception:  # a broken connection: nothing left to close
            log.debug("closing the confirm channel failed", exc_info=True)


@dataclass(frozen=True)
class _Unconfirmed:
    """A chunk handed to RabbitMQ whose confirms are not yet in: its delivery tags, its runs."""

    first: int
    last: int
    run_ids: list[int]
    sent: int  # the runs' messages among the tags (the rest: their task-sent events')


class Burst:
    """A tick's burst, published chunk by chunk as the beat wins them (``publish``); ``sent``
    counts the messages the broker took, final once the block ends.

    On Redis each chunk goes out in one pipelined round trip. On RabbitMQ the chunks go out
    back to back on one channel in confirm mode, and a chunk's confirms are awaited only when
    the next chunk is handed over or the burst ends: the broker confirms (and writes to disk)
    one chunk while the beat inserts the next, instead of the beat waiting for it. A chunk
    whose sending fails, or whose confirms do not all come, is logged and left ``scheduled``
    for maintenance (its delivery is uncertain: some messages may have arrived)."""

    def __init__(self, producer: Any, *, schedule_of: observers.ScheduleOf | None = None) -> None:
        self.producer = producer
        self.schedule_of = schedule_of
        self.sent = 0
        self.failed: set[int] = set()  # runs whose message may not have gone out
        self._templates: dict[tuple[Any, ...], _Template] = {}
        self._driver = _transport(producer)
        self._confirms: _Confirms | None = None
        self._unconfirmed: _Unconfirmed | None = None

    def __enter__(self) -> Burst:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._settle()
        if self._confirms is not None:
            self._confirms.close()
            self._confirms = None

    def publish(
        self, runs: Sequence[Publication], shapes: list[tuple[Any, ...]] | None = None
    ) -> None:
        """Send ``runs`` (one chunk; ``shapes``: each one's ``shape_of``, if known). A run whose
        message cannot be made is logged and left ``scheduled``."""
        self._settle()
        if shapes is None:
            shapes = [shape_of(run.job) for run in runs]
        try:
            for run, shape in zip(runs, shapes, strict=True):
                if shape not in self._templates:
                    self._templates[shape] = template = _template(
                        run, self.producer, self._beat_headers(run.job)
                    )
                    for entity in template.declare:
                        self.producer.maybe_declare(entity)
            if self._driver == "amqp":
                self._publish_confirmed(runs, shapes)
            elif self._driver == "redis" and self.producer.supports_batch_publish:
                # The runs' messages and their task-sent events' one.
                with self.producer.batch(max_size=len(runs) + 1):
                    buffered = self._publish_each(self._send, runs, shapes, self.producer)
                self.sent += buffered  # once the pipeline went out whole
            else:
                self.sent += self._publish_each(self._send, runs, shapes, self.producer)
        except Exception:
            self._chunk_failed([run.run_id for run in runs])

    def _beat_headers(self, job: Job) -> dict[str, Any]:
        if self.schedule_of is None:
            return {}
        return observers.beat_headers(job.name, self.schedule_of(job))

    def _publish_confirmed(self, runs: Sequence[Publication], shapes: list[Any]) -> None:
        if self._confirms is None:
            self._confirms = _Confirms(self.producer.connection)
        confirms = self._confirms
        first = confirms.published + 1
        sent = self._publish_each(confirms.send, runs, shapes, confirms.producer)
        confirms.flush()
        if confirms.published >= first:
            self._unconfirmed = _Unconfirmed(
                first, confirms.published, [run.run_id for run in runs], sent
            )

    def _send(
        self, shape: tuple[Any, ...], template: _Template, task_id: str,
        kwargs: dict[str, Any], job: str, trace: dict[str, Any],
    ) -> None:  # fmt: skip
        template.publish(self.producer, task_id, kwargs, job, trace)

    def _publish_each(
        self, send: Callable[..., None], runs: Sequence[Publication], shapes: list[Any],
        events_producer: Any,
    ) -> int:  # fmt: skip
        """Send each run's message, then the task-sent events of those sent (one message, on
        ``events_producer``); the number of runs sent."""
        buffered = 0
        events: list[tuple[_SentEvent, dict[str, Any]]] = []
        for run, shape in zip(runs, shapes, strict=True):
            template = self._templates[shape]
            task_id, kwargs, job = task_id_for(run.run_id), _run_kwargs(run), run.job.name
            try:
                trace = template.trace(task_id, run.job, self.schedule_of)
                send(shape, template, task_id, kwargs, job, trace)
                event = template.event(task_id, kwargs, job)
                if event is not None and template.sent_event is not None:
                    events.append((template.sent_event, event))
            except Exception:
                self.failed.add(run.run_id)
                log.exception(
                    "publish failed; the run stays scheduled for maintenance to re-publish",
                    extra={"action": "publish_failed", "run_id": run.run_id},
                )
            else:
                buffered += 1
        if events:
            self._publish_events(events_producer, events)
        return buffered

    @staticmethod
    def _publish_events(producer: Any, events: list[tuple[_SentEvent, dict[str, Any]]]) -> None:
        try:
            events[0][0].publish_batch(producer, events)
        except Exception:  # what the events tell is the runs' records', kept all the same
            log.exception(
                "publishing a burst chunk's task-sent events failed",
                extra={"action": "sent_events_failed", "count": len(events)},
            )

    def _settle(self) -> None:
        """Await the confirms of the chunk handed to RabbitMQ last."""
        chunk, self._unconfirmed = self._unconfirmed, None
        if chunk is None or self._confirms is None:
            return
        try:
            self._confirms.await_through(chunk.first, chunk.last)
        except Exception:
            self._chunk_failed(chunk.run_ids)
        else:
            self.sent += chunk.sent

    def _chunk_failed(self, run_ids: list[int]) -> None:
        self.failed.update(run_ids)
        log.exception(
            "publishing a burst chunk of %d run(s) failed; they stay scheduled for maintenance "
            "to re-publish",
            len(run_ids),
            extra={"action": "publish_failed", "run_ids": run_ids[:100]},
        )
        # A channel that failed once is not trusted again: the next chunk opens its own.
        if self._confirms is not None:
            self._confirms.close()
            self._confirms = None
            self._unconfirmed = None


def publish_burst(runs: Sequence[Publication], producer: Any) -> int:
    """Publish ``runs`` in one batch (a burst of one chunk); the number sent."""
    with Burst(producer) as burst:
        burst.publish(runs)
    return burst.sent
