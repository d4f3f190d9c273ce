"""Celery's events as ``celery events``, Flower and exporters hear them: a real
``app.events.Receiver`` on the broker, in a thread, keeping every event it receives."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery import current_app
from celery.events.event import get_exchange

_PROBE = "jobs-probe"


class HeardEvents:
    """The events received so far, in order of arrival."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def of_type(self, kind: str, queue: str | None = None) -> list[dict[str, Any]]:
        """The events of ``kind`` (a task's: sent to ``queue``, when given)."""
        return [
            event
            for event in list(self.events)
            if event.get("type") == kind and queue in (None, event.get("queue"))
        ]

    def wait_for(
        self, kind: str, count: int, timeout: float = 30.0, queue: str | None = None
    ) -> list[dict[str, Any]]:
        """``of_type`` once at least ``count`` came, or what came by ``timeout``."""
        deadline = time.monotonic() + timeout
        while len(self.of_type(kind, queue)) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.of_type(kind, queue)


@contextmanager
def events_heard(url: str, timeout: float = 30.0) -> Iterator[HeardEvents]:
    """Receive the broker's events for the block; it starts once the receiver has heard a probe
    event of its own (on Redis, events are PUBLISHed: none before the subscription counts)."""
    heard = HeardEvents()
    with current_app.connection_for_read(url) as conn:
        receiver = current_app.events.Receiver(conn, handlers={"*": heard.events.append})
        receiver.exchange = receiver.queue.exchange = _apps_exchange()
        thread = threading.Thread(
            target=lambda: receiver.capture(limit=None, timeout=None, wakeup=False), daemon=True
        )
        thread.start()
        try:
            _until_heard(url, heard, timeout)
            yield heard
        finally:
            receiver.should_stop = True
            thread.join(timeout=10)


def _until_heard(url: str, heard: HeardEvents, timeout: float) -> None:
    probe = uuid.uuid4().hex
    deadline = time.monotonic() + timeout
    with current_app.connection_for_write(url) as conn:
        dispatcher = current_app.events.Dispatcher(conn, enabled=True)
        dispatcher.exchange = _apps_exchange()
        try:
            while not any(event.get("probe") == probe for event in heard.of_type(_PROBE)):
                if time.monotonic() > deadline:
                    raise TimeoutError("the events receiver heard nothing")
                dispatcher.send(_PROBE, probe=probe)
                time.sleep(0.05)
        finally:
            dispatcher.close()


def _apps_exchange() -> Any:
    # The exchange Celery's own publisher of task-sent events declares: made for the app's
    # broker (fanout on Redis, topic on RabbitMQ), whichever broker the test publishes to.
    return get_exchange(current_app.connection_for_write(), name=current_app.conf.event_exchange)
