"""Bursts: N slots due at the same instant, from the slot until the last message is in the broker.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/jobs \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/4 \\
        .venv/bin/python -m bench.burst_bench [--sizes 10000,100000] [--rounds 3]

In one run, on the same jobs (every one due at the same slot, one queue):

- **per run** (the path before bulk publishing, ``JOBS_BULK_PUBLISH=0``): one beat's tick
  inserts the slots 500 at a time and sends each run with ``send_task``;
- **bulk** (the default): the same tick, each chunk's messages made from one template per job
  shape and sent in one pipelined round trip (``jobs.broker.bulk_publish``);
- **bulk, quiet**: the same bulk tick without Celery's ``task-sent`` events (the burst path
  before issue 40, and what a project with ``task_send_sent_event`` off gets): what each run's
  event costs;
- **bulk, tools on** (``--tools``): the bulk tick with sentry-sdk (its Celery integration,
  Crons on, every trace sampled, envelopes dropped) and OpenTelemetry's Celery instrumentation
  (an in-memory exporter) set up: each message a trace of its own (``jobs.observers``);
- **floor**: the bare pipelined ``LPUSH`` of the very messages the bulk tick sent (read back from
  Redis), 500 per round trip: what sending them costs with nothing else to do;
- **three beats**: three real ``celery beat`` processes sharing the burst (bulk), from the slot
  until the last message is in the broker; each slot must have one run and one message.

On RabbitMQ (``CELERY_BROKER_URL=amqp://...``) the floor is the bare send of the same messages'
frames, encoded before the clock starts, one write per 500 on a channel in confirm mode and
the confirms awaited once per 500 (a ``basic_publish`` per message, the floor before
``jobs.broker.amqp_frames``, costs py-amqp's encoding and a write per message on top).

It works in its own database next to ``DATABASE_URL``'s (created afresh, dropped at the end) and
on a queue of its own.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.beat_bench import _ours, _process_env, _quiet, _wipe, create_jobs
from bench.databases import django_on_fresh_database
from bench.measure import percentile
from bench.processes import CELERY, Processes, wait_until

CHUNK = 500


def _summary(values: list[float]) -> dict[str, float] | None:
    """Median, p99 and count; ``None`` for a path not measured (``--per-run-rounds 0``)."""
    if not values:
        return None
    return {"median": statistics.median(values), "p99": percentile(values, 99), "n": len(values)}


def _cell(summary: dict[str, float] | None) -> str:
    return "-" if summary is None else f"{summary['median']:.2f} s ({summary['p99']:.2f} s)"


class _Queue:
    """The bench's queue on the broker: its length, its messages, emptied, removed."""

    def __init__(self, url: str, name: str) -> None:
        self.url, self.name = url, name
        self.redis = url.split(":", 1)[0].startswith(("redis", "rediss"))
        if self.redis:
            import redis

            self.client = redis.Redis.from_url(url)

    def length(self) -> int:
        if self.redis:
            return int(self.client.llen(self.name))
        from amqp.exceptions import NotFound
        from kombu import Connection

        with Connection(self.url) as conn:
            channel: Any = conn.default_channel
            try:
                _name, messages, _consumers = channel.queue_declare(self.name, passive=True)
            except NotFound:  # not declared yet: no beat published to it
                return 0
            return int(messages)

    def take_all(self) -> list[Any]:
        """Every message, removed (Redis: the raw list items; RabbitMQ: amqp messages)."""
        if self.redis:
            items = list(self.client.lrange(self.name, 0, -1))
            self.client.delete(self.name)
            return items
        from celery import current_app

        taken = []
        with current_app.connection_for_read(self.url) as conn:
            channel: Any = conn.default_channel
            while (message := channel.basic_get(self.name, no_ack=True)) is not None:
                taken.append(message)
        return taken

    def empty(self) -> None:
        if self.redis:
            self.client.delete(self.name)
        elif self.length():
            self.take_all()

    def remove(self) -> None:
        """The queue gone from the broker (a RabbitMQ queue outlives the bench otherwise)."""
        if self.redis:
            self.client.delete(self.name)
            return
        from kombu import Connection

        with Connection(self.url) as conn:
            channel: Any = conn.default_channel
            channel.queue_delete(self.name)


def _set_bulk(on: bool) -> None:
    from django.conf import settings

    from jobs.conf import get_conf

    settings.JOBS_BULK_PUBLISH = on
    get_conf.cache_clear()


def _due_at(anchor: datetime) -> None:
    """Every job's first slot moved to ``anchor`` (the schedule change log tells the beats)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobs_jobrun RESTART IDENTITY CASCADE")
        cursor.execute("UPDATE django_celery_beat_periodictask SET start_time = %s", [anchor])


def one_tick(
    count: int, queue: _Queue, bulk: bool, frames: bool = True, sent_events: bool = True
) -> float:
    """One in-process beat: its tick at the slot, until every message is in the broker
    (``frames``: RabbitMQ's chunks framed by jobs.broker.amqp_frames, else kombu's publish;
    ``sent_events``: Celery's ``task-sent`` event per run)."""
    from celery import current_app
    from django.utils import timezone

    from jobs.broker import bulk_publish
    from jobs.models import JobRun

    current_app.conf.task_send_sent_event = sent_events
    _set_bulk(bulk)
    bulk_publish.AMQP_FRAMES = frames
    anchor = timezone.now().replace(microsecond=0) + timedelta(seconds=8 + count // 10_000)
    _due_at(anchor)
    scheduler = _ours()
    assert timezone.now() < anchor, "the scheduler started after the slot: raise the margin"
    while timezone.now() < anchor:
        time.sleep(0.001)
    began = time.perf_counter()
    scheduler.tick_at(timezone.now())
    # Until the broker holds them all: without publisher confirms (RabbitMQ, per run) the tick
    # ends before the last messages are in the queue.
    while queue.length() < count and time.perf_counter() - began < 600:
        time.sleep(0.002)
    elapsed = time.perf_counter() - began
    created = JobRun.objects.filter(scheduled_for=anchor).count()
    queued = queue.length()
    assert created == count and queued == count, (created, queued)
    return elapsed


def floor(messages: list[Any], queue: _Queue) -> float:
    """The bare send of ``messages``: pipelined ``LPUSH`` (Redis) or confirmed ``basic_publish``
    (RabbitMQ), ``CHUNK`` per round trip."""
    if queue.redis:
        began = time.perf_counter()
        for start in range(0, len(messages), CHUNK):
            pipe = queue.client.pipeline(transaction=False)
            for item in messages[start : start + CHUNK]:
                pipe.lpush(queue.name, item)
            pipe.execute()
        elapsed = time.perf_counter() - began
    else:
        from kombu import Connection

        with Connection(queue.url) as conn:
            channel: Any = conn.channel()
            channel.confirm_select()
            chunks = _frames(channel, messages, queue.name)
            began = time.perf_counter()
            sent = 0
            for count, data in chunks:
                channel.connection.transport.write(data)
                sent += count
                _await_confirms(channel, sent)
            elapsed = time.perf_counter() - began
            channel.close()
    assert queue.length() == len(messages)
    queue.empty()
    return elapsed


def _frames(channel: Any, messages: list[Any], routing_key: str) -> list[tuple[int, bytes]]:
    """Each chunk of ``messages`` as the frames py-amqp writes to publish it, made before the
    clock starts: the floor times only their sending and confirmation."""
    from amqp import spec
    from amqp.method_framing import frame_writer

    from jobs.broker.amqp_frames import FrameBuffer, publish_arguments

    arguments = publish_arguments("", routing_key)
    frames = FrameBuffer()
    write_frame = frame_writer(channel.connection, frames)
    chunks = []
    for start in range(0, len(messages), CHUNK):
        chunk = messages[start : start + CHUNK]
        for message in chunk:
            write_frame(1, channel.channel_id, spec.Basic.Publish, arguments, message)
        chunks.append((len(chunk), frames.take()))
    return chunks


def _await_confirms(channel: Any, last: int) -> None:
    from amqp import spec

    acked = {"upto": 0}

    def on_ack(tag: int, multiple: bool) -> None:
        acked["upto"] = max(acked["upto"], tag)

    channel.events["basic_ack"].add(on_ack)
    try:
        while acked["upto"] < last:
            channel.wait([spec.Basic.Ack, spec.Basic.Nack], timeout=30)
    finally:
        channel.events["basic_ack"].discard(on_ack)


@contextmanager
def _tools_on() -> Iterator[None]:
    """sentry-sdk and OpenTelemetry set up as a team runs them (traces sampled, Crons on), their
    output dropped (Sentry) or kept in memory (OpenTelemetry)."""
    import sentry_sdk
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from sentry_sdk.integrations.celery import CeleryIntegration
    from sentry_sdk.transport import Transport

    class Dropping(Transport):
        def capture_envelope(self, envelope: Any) -> None:
            return None

    sentry_sdk.init(
        dsn="https://public@sentry.invalid/1", transport=Dropping(),
        integrations=[CeleryIntegration(monitor_beat_tasks=True)], traces_sample_rate=1.0,
    )  # fmt: skip
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    instrumentor = CeleryInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield
    finally:
        instrumentor.uninstrument()
        sentry_sdk.init(dsn=None)


def in_process(
    count: int, rounds: int, per_run_rounds: int, broker: str, tools: bool = False
) -> dict[str, Any]:
    name = f"bench-burst-{uuid.uuid4().hex[:8]}"
    queue = _Queue(broker, name)
    _wipe()
    began = time.perf_counter()
    create_jobs(count, queue=name, every=lambda n: 3600, anchor=datetime(2100, 1, 1, tzinfo=UTC))
    print(f"  {count} jobs created in {time.perf_counter() - began:.1f} s", flush=True)
    result: dict[str, Any] = {"slots": count}
    try:
        per_run, bulk, floors, kombu, quiet, tooled = [], [], [], [], [], []
        for n in range(max(rounds, per_run_rounds)):
            if n < per_run_rounds:
                per_run.append(one_tick(count, queue, bulk=False))
                queue.empty()
                print(f"  per run: {per_run[-1]:.2f} s", flush=True)
            if n < rounds:
                bulk.append(one_tick(count, queue, bulk=True))
                messages = queue.take_all()
                print(f"  bulk:    {bulk[-1]:.2f} s", flush=True)
                floors.append(floor(messages, queue))
                print(f"  floor:   {floors[-1]:.2f} s", flush=True)
                quiet.append(one_tick(count, queue, bulk=True, sent_events=False))
                queue.empty()
                print(f"  bulk, quiet: {quiet[-1]:.2f} s", flush=True)
                # Once more after the quiet tick, so neither has the other's place every round.
                bulk.append(one_tick(count, queue, bulk=True))
                queue.empty()
                print(f"  bulk:    {bulk[-1]:.2f} s", flush=True)
                if tools:
                    with _tools_on():
                        tooled.append(one_tick(count, queue, bulk=True))
                    queue.empty()
                    print(f"  bulk, tools on: {tooled[-1]:.2f} s", flush=True)
                if not queue.redis:  # the same bulk tick without jobs.broker.amqp_frames
                    kombu.append(one_tick(count, queue, bulk=True, frames=False))
                    queue.empty()
                    print(f"  bulk, kombu's publish: {kombu[-1]:.2f} s", flush=True)
        result.update(
            per_run=_summary(per_run),
            bulk=_summary(bulk),
            floor=_summary(floors),
            kombu=_summary(kombu),
            quiet=_summary(quiet),
            tools=_summary(tooled),
        )
    finally:
        _set_bulk(True)
        from jobs.broker import bulk_publish

        bulk_publish.AMQP_FRAMES = True
        queue.remove()
    return result


def three_beats(count: int, database_url: str, broker: str, tmp: Path) -> dict[str, Any]:
    """Three ``celery beat`` processes, bulk publishing: slot → last message in the broker."""
    from django.utils import timezone

    from jobs.models import JobRun

    name = f"bench-burst-{uuid.uuid4().hex[:8]}"
    queue = _Queue(broker, name)
    _wipe()
    create_jobs(count, queue=name, every=lambda n: 3600, anchor=datetime(2100, 1, 1, tzinfo=UTC))
    processes = Processes(_process_env(database_url), tmp, grace=20)
    beats = [f"burst-beat-{n}" for n in range(3)]
    try:
        for beat in beats:
            processes.start(beat, [*CELERY, "beat", "-l", "info"])
        wait_until(
            lambda: all("beat loaded" in processes.log(b) for b in beats), 300, "beats started"
        )
        anchor = timezone.now().replace(microsecond=0) + timedelta(seconds=5 + count // 10_000)
        _due_at(anchor)
        while timezone.now() < anchor:
            time.sleep(0.002)
        while queue.length() < count and timezone.now() < anchor + timedelta(seconds=300):
            time.sleep(0.002)
        elapsed = (timezone.now() - anchor).total_seconds()
        runs = JobRun.objects.filter(scheduled_for=anchor)
        assert runs.count() == count, runs.count()
        assert queue.length() == count, "a slot published twice"
        # Each beat logs its share once its tick ended (on RabbitMQ, its last confirms in).
        fired = f"beat fired {count} slot(s)"
        wait_until(lambda: all(fired in processes.log(b) for b in beats), 120, "every beat's tick")
        shares = [
            sum(
                int(x)
                for x in re.findall(
                    r"beat fired \d+ slot\(s\): (\d+) created here", processes.log(b)
                )
            )
            for b in beats
        ]
    finally:
        processes.stop_all()
        queue.remove()
    print(
        f"  3 beats: {count} slots out in {elapsed:.2f} s; runs made per beat {shares}", flush=True
    )
    return {"slots": count, "seconds": elapsed, "shares": shares}


def report(results: dict[str, Any]) -> str:
    lines = [
        "| slots due at once | per run (send_task) | bulk | floor (bare send) "
        "| bulk / floor | per run / bulk | 3 beats, bulk (runs made per beat) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    beats = {row["slots"]: row for row in results["beats"]}
    for row in results["in_process"]:
        per_run, bulk, bare = row["per_run"], row["bulk"], row["floor"]
        three = beats.get(row["slots"])
        shares = ", ".join(map(str, three["shares"])) if three else ""
        beats_cell = f"{three['seconds']:.2f} s ({shares})" if three else "-"
        speedup = "-" if per_run is None else f"{per_run['median'] / bulk['median']:.1f}x"
        lines.append(
            f"| {row['slots']:,} | {_cell(per_run)} | {_cell(bulk)} | {_cell(bare)} "
            f"| {bulk['median'] / bare['median']:.1f}x | {speedup} | {beats_cell} |"
        )
    framed = [row for row in results["in_process"] if row.get("kombu")]
    if framed:
        lines += [
            "",
            "| slots due at once | bulk, jobs.broker.amqp_frames | bulk, kombu's publish | gain |",
            "| --- | --- | --- | --- |",
        ]
        for row in framed:
            gain = row["kombu"]["median"] / row["bulk"]["median"]
            lines.append(
                f"| {row['slots']:,} | {_cell(row['bulk'])} | {_cell(row['kombu'])} | {gain:.2f}x |"
            )
    lines += [
        "",
        "| slots due at once | bulk, quiet (no task-sent) | bulk | cost of the events "
        "| bulk, Sentry + OpenTelemetry on |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in results["in_process"]:
        cost = row["bulk"]["median"] / row["quiet"]["median"] - 1
        lines.append(
            f"| {row['slots']:,} | {_cell(row['quiet'])} | {_cell(row['bulk'])} "
            f"| {cost:+.0%} | {_cell(row['tools'])} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.burst_bench")
    parser.add_argument("--sizes", default="10000,100000", help="slots due at once")
    parser.add_argument("--rounds", type=int, default=3, help="bulk and floor rounds per size")
    parser.add_argument(
        "--per-run-rounds", type=int, default=3, help="per-run rounds (at most 1 above 10k: slow)"
    )
    parser.add_argument("--skip-processes", action="store_true", help="no three-beat run")
    parser.add_argument(
        "--tools", action="store_true", help="also with Sentry and OpenTelemetry on"
    )
    parser.add_argument("--only-processes", action="store_true", help="only the three-beat run")
    args = parser.parse_args(argv)

    broker = os.environ.get("CELERY_BROKER_URL", "")
    sizes = [int(size) for size in args.sizes.split(",") if size]
    results: dict[str, Any] = {"in_process": [], "beats": []}
    with django_on_fresh_database("_burst_bench", "bench.beat_bench") as bench_url:
        with _quiet():
            for size in sizes if not args.only_processes else []:
                print(f"{size} slots due at once, one beat in-process", flush=True)
                per_run_rounds = (
                    args.per_run_rounds if size <= 10_000 else min(args.per_run_rounds, 1)
                )
                results["in_process"].append(
                    in_process(size, args.rounds, per_run_rounds, broker, tools=args.tools)
                )
        if not args.skip_processes:
            with tempfile.TemporaryDirectory(prefix="burst-bench-") as tmp:
                for size in sizes:
                    print(f"{size} slots due at once, 3 beat processes", flush=True)
                    results["beats"].append(three_beats(size, bench_url, broker, Path(tmp)))

    print()
    scheme = broker.split(":", 1)[0]
    print(
        f"burst benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, {scheme}"
    )
    print(report(results) if results["in_process"] else results["beats"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
