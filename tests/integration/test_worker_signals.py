"""A worker's main process (jobs.process.worker_signals), driven by Celery's own worker signals
against real PostgreSQL: ``worker_ready`` registers the node and starts its threads, once per
process; ``worker_shutting_down`` tells the runs and the supervisor; ``worker_shutdown`` stops the
threads and marks the node stopped."""

from __future__ import annotations

import gc
import os
import socket
import weakref
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import celery
import pytest
from celery import signals

from jobs.guard import shutdown_notice
from jobs.models import Node, NodeState
from jobs.process import worker_signals
from tests.acceptance.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


class _Consumer:
    """What Celery passes as worker_ready's sender: the worker's consumer (a hashable one, as
    signals key their senders)."""

    def __init__(
        self, name: str = "w1@h", queues: tuple[str, ...] = ("default", "reports")
    ) -> None:
        self.hostname = name
        consume_from = dict.fromkeys(queues)
        self.app = SimpleNamespace(
            amqp=SimpleNamespace(queues=SimpleNamespace(consume_from=consume_from))
        )
        self.controller = SimpleNamespace(concurrency=3)


@pytest.fixture
def worker() -> Iterator[None]:
    """Whatever a test started is stopped, and the shutdown it announced forgotten."""
    yield
    signals.worker_shutdown.send(sender=None)
    shutdown_notice.shutting_down.clear()


def _shutting_down() -> None:
    signals.worker_shutting_down.send(sender="w1@h", sig="SIGTERM", how="Warm", exitcode=0)


def test_worker_ready_registers_the_node_and_starts_its_threads(worker: None) -> None:
    signals.worker_ready.send(sender=_Consumer())
    wait_for(lambda: Node.objects.filter(name="w1@h").exists(), timeout=10, what="registration")
    node = Node.objects.get(name="w1@h")
    assert (node.host, node.pid, node.state) == (socket.gethostname(), os.getpid(), "alive")
    assert (node.queues, node.concurrency) == (["default", "reports"], 3)
    assert node.version == f"celery {celery.__version__}"
    (supervisor,) = worker_signals._running
    assert supervisor.node == "w1@h" and supervisor.pid == os.getpid()
    assert len(worker_signals._senders) == 1


def test_a_second_worker_ready_in_the_same_process_starts_nothing(worker: None) -> None:
    signals.worker_ready.send(sender=_Consumer())
    signals.worker_ready.send(sender=_Consumer("w1-again@h"))
    assert len(worker_signals._running) == len(worker_signals._senders) == 1
    wait_for(lambda: Node.objects.filter(name="w1@h").exists(), timeout=10, what="registration")
    assert not Node.objects.filter(name="w1-again@h").exists()


def test_the_shutdown_stops_the_threads_and_marks_the_node_stopped(worker: None) -> None:
    signals.worker_ready.send(sender=_Consumer())
    wait_for(lambda: Node.objects.filter(name="w1@h").exists(), timeout=10, what="registration")
    (supervisor,) = worker_signals._running
    (sender,) = worker_signals._senders
    assert sender.started
    _shutting_down()
    assert shutdown_notice.shutting_down.is_set()  # the runs under way are told
    assert supervisor.join(30), "the supervisor did not stop when asked"
    signals.worker_shutdown.send(sender=None)
    assert worker_signals._running == [] and worker_signals._senders == []
    node = Node.objects.get(name="w1@h")
    assert node.state == NodeState.STOPPED and node.stopped_at is not None


def test_connecting_again_adds_no_second_receiver() -> None:
    watched = (
        signals.worker_init,
        signals.worker_process_init,
        signals.worker_ready,
        signals.worker_shutting_down,
        signals.worker_shutdown,
        signals.task_failure,
        signals.task_unknown,
    )
    gc.collect()  # receivers other tests left for collection are gone before the count
    before = [_live(signal) for signal in watched]
    worker_signals.connect_worker_signals()
    assert [_live(signal) for signal in watched] == before


def _live(signal: Any) -> int:
    """The receivers of ``signal`` still alive: a connect also drops the weakly held ones that
    were collected meanwhile (another test's), which is not a receiver fewer of ours."""
    return sum(
        1
        for _, receiver in signal.receivers
        if not (isinstance(receiver, weakref.ReferenceType) and receiver() is None)
    )
