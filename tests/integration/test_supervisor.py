"""The continuous-job supervisor on PostgreSQL, in process: ticks driven by the test.

Node rows are registered with a long heartbeat interval so they stay alive without a heartbeat
thread; supervisors use a 0.5 s heartbeat, so leases last 1.5 s and lapse quickly.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext

import tests.support.jobs_continuous  # noqa: F401  (registers the functions)
from jobs import services
from jobs.audit import Actor
from jobs.continuous import nodes, tenures
from jobs.continuous.nodes import NodeInfo
from jobs.continuous.supervisor import _VERSION, Supervisor, node_of
from jobs.guard import lease
from jobs.models import Job, JobRun, Lease, RunStatus, Trigger
from tests.acceptance.conftest import wait_for
from tests.support.job_factory import new_job
from tests.support.jobs_continuous import fenced_token_regressions, read_events

pytestmark = pytest.mark.django_db(transaction=True)

HEARTBEAT = 0.5  # supervisors' heartbeat: continuous leases last 1.5 s


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "continuous.log"


@pytest.fixture
def make_continuous(log: Path) -> Callable[..., Job]:
    def make(name: str, task: str = "tests.continuous.step", **policies: Any) -> Job:
        return new_job(name, task, None, log=log, **policies)

    return make


@pytest.fixture
def supervisors() -> Iterator[Callable[..., Supervisor]]:
    started: list[Supervisor] = []

    def make(name: str, queues: tuple[str, ...] = ("default",), **kwargs: Any) -> Supervisor:
        info = NodeInfo(
            name=name,
            host="host",
            pid=os.getpid(),
            queues=list(queues),
            concurrency=1,
            version="test",
            heartbeat_interval=3600,
        )
        nodes.register(info)
        kwargs.setdefault("fallback_after", 3600)
        kwargs.setdefault("heartbeat", HEARTBEAT)
        supervisor = Supervisor(
            node=name,
            pid=os.getpid(),
            queues=lambda: queues,
            period=0.2,
            shutdown_grace=10,
            **kwargs,
        )
        started.append(supervisor)
        return supervisor

    yield make
    for supervisor in started:
        supervisor.shutdown()


def _holders() -> dict[str, str]:
    live = Lease.objects.filter(expires_at__gt=Now())
    return {row.key: node_of(row.holder) for row in live}


def _ticks_until(supervisor: Supervisor, condition: Callable[[], bool], what: str) -> None:
    def tick_then_check() -> bool:
        supervisor.tick()
        return condition()

    wait_for(tick_then_check, timeout=15, what=what, poll=0.1)


def test_two_nodes_split_the_jobs_and_each_tenure_is_one_running_record(
    make_continuous: Callable[..., Job], supervisors: Callable[..., Supervisor], log: Path
) -> None:
    for i in range(4):
        make_continuous(f"c{i}")
    a, b = supervisors("a@h"), supervisors("b@h")
    a.tick()
    b.tick()
    assert len(a.held()) == 2 and len(b.held()) == 2
    assert set(a.held()).isdisjoint(b.held())
    runs = list(JobRun.objects.filter(status=RunStatus.RUNNING))
    assert len(runs) == 4
    for run in runs:
        assert run.trigger == Trigger.CONTINUOUS and run.started_at is not None
        owner = a if run.lease_key in a.held() else b
        assert run.node == owner.node and run.fencing_token == owner.held()[run.lease_key]
    assert sorted(_holders().values()) == ["a@h", "a@h", "b@h", "b@h"]
    wait_for(
        lambda: {e.job for e in read_events(log) if e.kind == "step"} == {"c0", "c1", "c2", "c3"},
        timeout=10,
        what="every job stepping",
    )
    assert fenced_token_regressions(read_events(log)) == []


def test_a_steady_tick_reads_one_row_and_a_change_the_whole_snapshot(
    make_continuous: Callable[..., Job], supervisors: Callable[..., Supervisor]
) -> None:
    make_continuous("c0")
    a = supervisors("a@h")
    a.tick()
    assert len(a.held()) == 1
    a.tick()  # its own acquisition moved the cluster version: it looks once more
    looks = a.full_looks
    with CaptureQueriesContext(connection) as queries:
        a.tick()
    assert [q["sql"] for q in queries] == [_VERSION]
    assert a.full_looks == looks

    # A job added elsewhere moves the version: the next tick reads the whole snapshot and
    # starts it.
    make_continuous("c1")
    a.tick()
    assert a.full_looks == looks + 1
    assert len(a.held()) == 2
    # A node joining moves it too (it is the nodes' rebalancing signal).
    a.tick()
    looks = a.full_looks
    supervisors("b@h")
    a.tick()
    assert a.full_looks == looks + 1


def test_pause_stops_the_tenure_cancelled_and_resume_starts_a_new_one(
    make_continuous: Callable[..., Job], supervisors: Callable[..., Supervisor]
) -> None:
    job = make_continuous("c0", task="tests.continuous.loop")
    a = supervisors("a@h")
    a.tick()
    first = a.held()[job.lock_key]
    services.pause("c0", actor=Actor.code("tests"))
    _ticks_until(a, lambda: not a.held(), "the paused job to stop")
    run = JobRun.objects.get(fencing_token=first)
    assert run.status == RunStatus.CANCELLED and "paused" in run.error
    assert lease.current_holder(job.lock_key) is None  # handed back at once
    services.resume("c0", actor=Actor.code("tests"))
    a.tick()
    assert a.held()[job.lock_key] == first + 1


def test_a_graceful_shutdown_hands_over_within_one_tick(
    make_continuous: Callable[..., Job], supervisors: Callable[..., Supervisor], log: Path
) -> None:
    make_continuous("c0", task="tests.continuous.loop")
    make_continuous("c1", task="tests.continuous.loop")
    a = supervisors("a@h")
    b = supervisors("b@h", on_shutdown=lambda: nodes.mark_stopped("b@h", os.getpid()))
    a.tick()
    b.tick()
    (key,) = b.held()
    token = b.held()[key]
    b.shutdown()
    run = JobRun.objects.get(fencing_token=token, lease_key=key)
    assert run.status == RunStatus.SUCCEEDED and run.finished_at is not None
    a.tick()
    assert a.held()[key] == token + 1
    events = read_events(log)
    # Its own job's events: the other job's lease started at the same token, in this process.
    handed = key.removeprefix("job:")
    assert [e.kind for e in events if (e.job, e.token) == (handed, token)][-2:] == ["final", "end"]
    assert fenced_token_regressions(events) == []


def test_a_joining_node_gets_its_share_by_graceful_handover(
    make_continuous: Callable[..., Job], supervisors: Callable[..., Supervisor], log: Path
) -> None:
    for i in range(4):
        make_continuous(f"c{i}", task="tests.continuous.loop")
    a = supervisors("a@h")
    a.tick()
    assert len(a.held()) == 4
    b = supervisors("b@h")
    _ticks_until(a, lambda: len(a.held()) == 2, "a to hand two jobs over")
    _ticks_until(b, lambda: len(b.held()) == 2, "b to take them")
    assert JobRun.objects.filter(status=RunStatus.SUCCEEDED).count() == 2
    assert JobRun.objects.filter(result__ended__icontains="handed over to b@h").count() == 2
    assert fenced_token_regressions(read_events(log)) == []


def test_a_lapsed_holder_is_taken_over_with_a_higher_token_and_recorded_lost(
    make_continuous: Callable[..., Job], supervisors: Callable[..., Supervisor]
) -> None:
    job = make_continuous("c0")
    ghost = lease.acquire(job.lock_key, "ghost@h:1:continuous", 2)
    assert ghost is not None
    begun = tenures.begin(job_id=job.pk, key=job.lock_key, token=ghost.token, node="ghost@h", pid=1)
    a = supervisors("a@h")
    a.tick()
    assert not a.held()  # still live: nobody takes it
    _ticks_until(a, lambda: bool(a.held()), "the takeover")
    assert a.held()[job.lock_key] == ghost.token + 1
    dead = JobRun.objects.get(pk=begun.run_id)
    assert dead.status == RunStatus.LOST and "taken over by a@h" in dead.error


def test_a_lost_lease_stops_the_tenure_and_records_it_lost(
    make_continuous: Callable[..., Job], supervisors: Callable[..., Supervisor], log: Path
) -> None:
    job = make_continuous("c0", task="tests.continuous.loop")
    a = supervisors("a@h")
    a.tick()
    token = a.held()[job.lock_key]
    assert lease.force_release(job.lock_key)
    wait_for(lambda: not a.held(), timeout=10, what="the tenure to notice")
    run = JobRun.objects.get(fencing_token=token)
    assert run.status == RunStatus.LOST
    events = [e for e in read_events(log) if e.token == token]
    assert events[-1].kind == "end" and "rejected" in {e.kind for e in events}


def test_a_crashing_function_is_recorded_failed_and_restarts_when_its_lease_lapses(
    make_continuous: Callable[..., Job], supervisors: Callable[..., Supervisor]
) -> None:
    job = make_continuous("boom", task="tests.continuous.crash")
    a = supervisors("a@h")
    a.tick()
    token = a.held()[job.lock_key]
    wait_for(lambda: not a.held(), timeout=10, what="the crash")
    run = JobRun.objects.get(fencing_token=token)
    assert run.status == RunStatus.FAILED and "boom" in run.error and run.traceback
    assert lease.current_holder(job.lock_key) is not None  # kept: a crash loop is throttled
    _ticks_until(a, lambda: a.held().get(job.lock_key) == token + 1, "the restart")


@pytest.mark.parametrize("statement", ["acquire", "begin"])
def test_a_start_cut_after_its_commit_gives_the_lease_back_at_the_next_look(
    make_continuous: Callable[..., Job],
    supervisors: Callable[..., Supervisor],
    monkeypatch: pytest.MonkeyPatch,
    statement: str,
) -> None:
    """The lease (or the tenure's record too) committed and a broken connection cut the reply:
    the job starts at the next looks, not once the 30 s lease lapses."""
    from django.db import OperationalError

    job = make_continuous("c")
    a = supervisors("a@h", heartbeat=10)  # leases of 30 s
    module = lease if statement == "acquire" else tenures
    real = getattr(module, statement)

    def committed_unseen(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(module, statement, real)
        real(*args, **kwargs)
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(module, statement, committed_unseen)
    real_release = lease.release

    def release_on_the_broken_connection(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(lease, "release", real_release)
        raise OperationalError("no connection to the server")

    if statement == "begin":  # the start gives its lease back on the same broken connection
        monkeypatch.setattr(lease, "release", release_on_the_broken_connection)
    with pytest.raises(OperationalError):
        a.tick()
    assert not a.held() and lease.current_holder(job.lock_key) is not None
    for _ in range(3):  # the look that gives it back, the look that starts it
        a.tick()
    assert a.held().get(job.lock_key) == 2
    running = JobRun.objects.filter(job=job, status=RunStatus.RUNNING)
    assert [run.fencing_token for run in running] == [2]
    if statement == "begin":  # the record of the start that never ran
        assert JobRun.objects.get(job=job, fencing_token=1).status == RunStatus.LOST


def test_orphans_nobody_takes_over_are_swept_lost(make_continuous: Callable[..., Job]) -> None:
    job = make_continuous("c0")
    ghost = lease.acquire(job.lock_key, "ghost@h:1:continuous", 2)
    assert ghost is not None
    begun = tenures.begin(job_id=job.pk, key=job.lock_key, token=ghost.token, node="ghost@h", pid=1)
    services.pause("c0", actor=Actor.code("tests"))
    assert tenures.close_orphans() == []  # still live
    wait_for(lambda: bool(tenures.close_orphans()), timeout=5, what="the sweep")
    assert JobRun.objects.get(pk=begun.run_id).status == RunStatus.LOST


def test_jobs_go_only_to_nodes_consuming_their_queue(
    make_continuous: Callable[..., Job], supervisors: Callable[..., Supervisor]
) -> None:
    job = make_continuous("special", queue="special")
    a = supervisors("a@h", queues=("default",))
    b = supervisors("b@h", queues=("default", "special"))
    a.tick()
    assert not a.held()
    b.tick()
    assert job.lock_key in b.held()


def test_a_free_job_its_planned_node_ignores_is_taken_after_the_fallback_delay(
    make_continuous: Callable[..., Job], supervisors: Callable[..., Supervisor]
) -> None:
    job = make_continuous("c0")
    supervisors("a@h")  # registered (alive), but never ticks: planned, never takes
    z = supervisors("z@h", fallback_after=0.5)
    z.tick()
    assert not z.held()
    _ticks_until(z, lambda: job.lock_key in z.held(), "the fallback")


def test_a_continuous_job_whose_lock_key_cannot_be_derived_leaves_the_others_supervised(
    make_continuous: Callable[..., Job], supervisors: Callable[..., Supervisor], log: Path
) -> None:
    healthy = make_continuous("c0")
    broken = new_job("by-city", "tests.by_city", None, kwargs={"city": "Paris"}, log=log)
    # Written around validation: a key longer than the lease column.
    Job.objects.filter(pk=broken.pk).update(kwargs={"log": str(log), "city": "x" * 300})
    a = supervisors("a@h")

    a.tick()
    a.tick()

    assert set(a.held()) == {healthy.lock_key}
    assert not JobRun.objects.filter(job=broken).exists()
