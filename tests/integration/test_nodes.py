"""Node rows on PostgreSQL: registration, heartbeats, liveness by the database clock."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db.models.functions import Now

from jobs.conf import JobsConf
from jobs.continuous import nodes
from jobs.continuous.nodes import Liveness, NodeHeartbeat, NodeInfo
from jobs.database.database_clock import database_now
from jobs.models import Node
from tests.acceptance.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
INFO = NodeInfo(
    name="w1@host",
    host="host",
    pid=4242,
    queues=["default"],
    concurrency=2,
    version="celery 5",
    heartbeat_interval=1.0,
)


def _liveness(name: str = INFO.name) -> str:
    return str(nodes.with_liveness(Node.objects.filter(name=name)).values_list("liveness").get()[0])


def _last_beat_ago(seconds: float, name: str = INFO.name) -> None:
    Node.objects.filter(name=name).update(last_heartbeat=Now() - timedelta(seconds=seconds))


def test_a_registered_node_is_alive_with_what_it_said_about_itself() -> None:
    nodes.register(INFO)
    node = Node.objects.get()
    assert (node.name, node.host, node.pid, node.concurrency, node.version) == (
        "w1@host",
        "host",
        4242,
        2,
        "celery 5",
    )
    assert node.queues == ["default"] and node.heartbeat_interval == 1.0
    assert node.started_at == node.last_heartbeat and node.stopped_at is None
    assert _liveness() == Liveness.ALIVE


def test_heartbeats_move_last_heartbeat_and_refresh_queues() -> None:
    nodes.register(INFO)
    _last_beat_ago(2)
    before = Node.objects.get().last_heartbeat
    assert nodes.heartbeat(INFO.name, INFO.pid, ["extra", "default"])
    node = Node.objects.get()
    assert node.last_heartbeat > before and node.queues == ["default", "extra"]


def test_three_missed_heartbeats_make_a_node_dead_and_one_more_makes_it_alive() -> None:
    nodes.register(INFO)
    _last_beat_ago(2.5)
    assert _liveness() == Liveness.ALIVE
    _last_beat_ago(3.5)
    assert _liveness() == Liveness.DEAD
    assert nodes.state_of(Node.objects.get(), database_now()) == Liveness.DEAD
    assert nodes.heartbeat(INFO.name, INFO.pid, INFO.queues)
    assert _liveness() == Liveness.ALIVE
    assert nodes.state_of(Node.objects.get(), database_now()) == Liveness.ALIVE


def test_each_node_is_judged_by_its_own_interval() -> None:
    nodes.register(INFO)
    nodes.register(replace(INFO, name="slow@host", heartbeat_interval=10.0))
    _last_beat_ago(5, INFO.name)
    _last_beat_ago(5, "slow@host")
    assert _liveness(INFO.name) == Liveness.DEAD
    assert _liveness("slow@host") == Liveness.ALIVE


def test_a_clean_shutdown_marks_the_node_stopped_at_once() -> None:
    nodes.register(INFO)
    assert nodes.mark_stopped(INFO.name, INFO.pid)
    node = Node.objects.get()
    assert _liveness() == Liveness.STOPPED and node.stopped_at is not None
    assert nodes.state_of(node, database_now()) == Liveness.STOPPED
    assert not nodes.heartbeat(INFO.name, INFO.pid, INFO.queues)


def test_a_restarted_worker_with_the_same_name_owns_the_row() -> None:
    nodes.register(INFO)
    restarted = NodeHeartbeat(replace(INFO, pid=5151))
    restarted.beat_once()
    assert Node.objects.get().pid == 5151
    assert not nodes.heartbeat(INFO.name, INFO.pid, INFO.queues)  # the old pid is refused
    restarted.beat_once()
    assert Node.objects.count() == 1 and Node.objects.get().pid == 5151


def test_the_heartbeat_thread_beats_on_its_interval_and_stop_marks_the_node_stopped() -> None:
    heartbeat = NodeHeartbeat(replace(INFO, heartbeat_interval=0.5), lambda: ["q2", "q1"])
    heartbeat.start()
    try:
        wait_for(heartbeat.registered.is_set, timeout=10, what="registration")
        first = Node.objects.get().last_heartbeat
        wait_for(
            lambda: Node.objects.get().last_heartbeat > first, timeout=10, what="a 2nd heartbeat"
        )
        assert Node.objects.get().queues == ["q1", "q2"]
    finally:
        heartbeat.stop()
    assert _liveness() == Liveness.STOPPED


def test_the_heartbeat_setting_is_validated_with_a_message_naming_it() -> None:
    with pytest.raises(ImproperlyConfigured, match="JOBS_NODE_HEARTBEAT"):
        JobsConf(modules=(), beat_max_interval=1.0, node_heartbeat=0.1)
    env = {**os.environ, "DJANGO_DEBUG": "1", "JOBS_NODE_HEARTBEAT": "soon"}
    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "check"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and "JOBS_NODE_HEARTBEAT" in result.stderr
