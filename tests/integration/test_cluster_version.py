"""The cluster version (jobs/sql/cluster_version.sql) moves on every write a supervision
snapshot would show, and on none of the frequent ones: supervisors read the whole snapshot only
when it moved (or a deadline they know of came), so a missed bump would delay a handoff and a
needless one would cost a snapshot. Real PostgreSQL triggers."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from django.db import connection

from jobs import services
from jobs.audit import Actor
from jobs.continuous import nodes
from jobs.continuous.nodes import NodeInfo
from jobs.continuous.supervisor import read_version
from jobs.guard import lease

pytestmark = pytest.mark.django_db(transaction=True)

CONTINUOUS = "a@h:1:continuous"  # the holder name a supervisor's tenures take


def _moves(action: Callable[[], object]) -> bool:
    before = read_version()
    action()
    after = read_version()
    assert before is not None and after is not None
    return after != before


def _node(name: str, queues: tuple[str, ...] = ("default",), interval: float = 5) -> NodeInfo:
    info = NodeInfo(
        name=name, host="h", pid=os.getpid(), queues=list(queues), concurrency=1,
        version="test", heartbeat_interval=interval,
    )  # fmt: skip
    return info


def test_continuous_leases_move_it_and_renewals_do_not() -> None:
    held = lease.acquire("job:poller", CONTINUOUS, 30)
    assert held is not None
    assert _moves(lambda: lease.renew(held)) is False
    assert _moves(lambda: lease.release(held)) is True
    taken: list[lease.HeldLease | None] = []
    assert _moves(lambda: taken.append(lease.acquire("job:poller", CONTINUOUS, 30))) is True
    token = taken[0]
    assert token is not None
    assert _moves(lambda: lease.force_release("job:poller")) is True
    # Taken over after it lapsed: a new token.
    assert _moves(lambda: lease.acquire("job:poller", "b@h:1:continuous", 30)) is True


def test_a_runs_lease_never_moves_it() -> None:
    holder = "a@h:1:run-7"
    held = lease.acquire("job:nightly", holder, 30)
    assert held is not None
    assert _moves(lambda: lease.renew(held)) is False
    assert _moves(lambda: lease.release(held)) is False
    assert _moves(lambda: lease.acquire("job:nightly", holder, 30)) is False


def test_nodes_joining_leaving_and_coming_back_move_it_and_heartbeats_do_not() -> None:
    info = _node("a@h")
    assert _moves(lambda: nodes.register(info)) is True
    assert _moves(lambda: nodes.heartbeat("a@h", os.getpid(), ["default"])) is False
    assert _moves(lambda: nodes.heartbeat("a@h", os.getpid(), ["default", "io"])) is True
    # A heartbeat after a gap in which the node may have counted as dead.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE jobs_node SET last_heartbeat = now() - interval '1 minute' WHERE name = 'a@h'"
        )
    assert _moves(lambda: nodes.heartbeat("a@h", os.getpid(), ["default", "io"])) is True
    assert _moves(lambda: nodes.mark_stopped("a@h", os.getpid())) is True


def test_job_edits_move_it(make_job: Callable[..., object]) -> None:
    assert _moves(lambda: make_job("edited")) is True
    assert _moves(lambda: services.pause("edited", actor=Actor.code("tests"))) is True
