"""The lease heartbeat keeps its own connection (jobs.guard.lease_keeper), on a PostgreSQL of the
test's own: renewals go on while the server refuses every new connection, a kept connection that
broke is replaced at the next renewal, and none is held once no run is in progress.

The server is private (the pgserver wheel, on a unix socket, with a small ``max_connections``):
the test fills every connection slot it has, which it must never do to the suite's shared server.
The heartbeat under test is a ``_Heartbeat`` of its own, bound to a database alias for that
server, in place of the process's.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import psycopg
import pytest
from django.db import connections

from jobs.guard import lease, lease_keeper
from jobs.guard.lease_keeper import LeaseKeeper
from jobs.models import Lease
from tests.support.private_postgres import PrivatePostgres, private_postgres_server

ALIAS = "heartbeat_private"
APPLICATION = "lease heartbeat test"
# Few enough that the test fills them at once; the lease's own connections and the reader fit.
MAX_CONNECTIONS = 10
TTL = 3.0  # a renewal every second; without one the local deadline passes after 2.7 s
KEY = "job:budget"


@pytest.fixture(scope="module")
def server() -> Iterator[PrivatePostgres]:
    with private_postgres_server(
        "jobs-pg-heartbeat-", f"ALTER SYSTEM SET max_connections = {MAX_CONNECTIONS};"
    ) as running:
        running.stop()
        running.start()
        with psycopg.connect(running.url, autocommit=True) as conn:
            assert conn.execute("SHOW max_connections").fetchone() == (str(MAX_CONNECTIONS),)
        yield running


@pytest.fixture
def heartbeat(
    server: PrivatePostgres, django_db_blocker: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[lease_keeper._Heartbeat]:
    """A heartbeat whose connection goes to the private server, in place of the process's."""
    socket_dir = str(server.server.get_postmaster_info().socket_dir)
    configured = connections.configure_settings(
        {
            "default": {},
            ALIAS: {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": "jobs",
                "USER": "postgres",
                "HOST": socket_dir,
                "CONN_HEALTH_CHECKS": True,
                "OPTIONS": {"application_name": APPLICATION},
            },
        }
    )
    connections.settings[ALIAS] = configured[ALIAS]
    beat = lease_keeper._Heartbeat(using=ALIAS)
    monkeypatch.setattr(lease_keeper, "_HEARTBEAT", beat)
    with django_db_blocker.unblock():
        try:
            private = connections[ALIAS]
            if "jobs_lease" not in private.introspection.table_names():
                with private.schema_editor() as editor:
                    editor.create_model(Lease)
            private.close()
            yield beat
        finally:
            connections[ALIAS].close()
            del connections[ALIAS]
            del connections.settings[ALIAS]
            with psycopg.connect(server.url, autocommit=True) as conn:
                conn.execute("DELETE FROM jobs_lease")


@pytest.fixture
def reader(server: PrivatePostgres) -> Iterator[psycopg.Connection[Any]]:
    """The test's own connection, opened before the server is filled up."""
    with psycopg.connect(server.url, autocommit=True) as conn:
        yield conn


def _expires_at(reader: psycopg.Connection[Any]) -> datetime:
    row = reader.execute("SELECT expires_at FROM jobs_lease WHERE key = %s", [KEY]).fetchone()
    assert row is not None
    return row[0]


def _heartbeat_backends(reader: psycopg.Connection[Any]) -> list[int]:
    """The server processes serving the heartbeat's connection (there is at most one)."""
    rows = reader.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", [APPLICATION]
    ).fetchall()
    return [int(pid) for (pid,) in rows]


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _connection_of_first_renewal(reader: psycopg.Connection[Any]) -> int:
    """The server process the heartbeat kept, once it has renewed the lease a first time."""
    first = _expires_at(reader)
    _wait_for(lambda: _expires_at(reader) > first, TTL, "the first renewal")
    (kept,) = _heartbeat_backends(reader)
    return kept


def _started(holder: str = "test:1:run") -> tuple[LeaseKeeper, threading.Event]:
    held = lease.acquire(KEY, holder, TTL, using=ALIAS)
    assert held is not None
    connections[ALIAS].close()  # the test thread's: only the heartbeat's stays
    stopping = threading.Event()
    keeper = LeaseKeeper(held, stopping)
    keeper.start()
    return keeper, stopping


@pytest.fixture
def keeper_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """The test's log records, the lease keeper's from INFO up."""
    caplog.set_level(logging.INFO, logger="jobs.guard.lease_keeper")
    return caplog


@contextlib.contextmanager
def _renewing(
    reader: psycopg.Connection[Any],
) -> Iterator[tuple[LeaseKeeper, threading.Event, int]]:
    """A keeper started, once it renewed its lease a first time: the keeper, its stop signal and
    the server process of the connection it kept. Stopped after the block."""
    keeper, stopping = _started()
    try:
        yield keeper, stopping, _connection_of_first_renewal(reader)
    finally:
        keeper.stop()


@contextlib.contextmanager
def _server_full(url: str) -> Iterator[str]:
    """Every connection slot the server has taken; the refusal a new connection gets."""
    hogs: list[psycopg.Connection[Any]] = []
    try:
        for _ in range(MAX_CONNECTIONS + 1):
            try:
                hogs.append(psycopg.connect(url, autocommit=True, connect_timeout=5))
            except psycopg.OperationalError as exc:
                refusal = str(exc)
                break
        else:
            raise AssertionError(f"{len(hogs)} connections made and the server took them all")
        yield refusal
    finally:
        for hog in hogs:
            hog.close()


def test_renewals_go_on_while_the_server_refuses_new_connections(
    server: PrivatePostgres,
    heartbeat: lease_keeper._Heartbeat,
    reader: psycopg.Connection[Any],
    keeper_logs: pytest.LogCaptureFixture,
) -> None:
    with _renewing(reader) as (keeper, stopping, kept):
        with _server_full(server.url) as refusal:
            assert "too many clients already" in refusal
            seen = [_expires_at(reader)]
            watch_until = time.monotonic() + 3 * TTL  # longer than the lease would live
            while time.monotonic() < watch_until:
                time.sleep(TTL / 6)
                now = _expires_at(reader)
                assert now >= seen[-1]
                if now > seen[-1]:
                    seen.append(now)
                assert _heartbeat_backends(reader) == [kept], "renewed on the kept connection"
            # Still full at the end: every renewal above was made while no new connection could be.
            with pytest.raises(psycopg.OperationalError, match="too many clients"):
                psycopg.connect(server.url, connect_timeout=5).close()

        assert len(seen) >= 3 * TTL / (TTL / 3) - 2, f"renewals while full: {seen}"
        assert not keeper.lost and not stopping.is_set(), keeper.lost_reason
        assert keeper.current.expires_at == _expires_at(reader)
        problems = [r.getMessage() for r in keeper_logs.records if r.levelno >= logging.WARNING]
        assert problems == []
    # No run in progress: the heartbeat gives its connection back at once.
    _wait_for(lambda: _heartbeat_backends(reader) == [], 2.0, "the idle heartbeat to disconnect")


def test_a_broken_kept_connection_is_replaced_at_the_next_renewal(
    heartbeat: lease_keeper._Heartbeat,
    reader: psycopg.Connection[Any],
    keeper_logs: pytest.LogCaptureFixture,
) -> None:
    with _renewing(reader) as (keeper, stopping, kept):
        # As a database restart, a failover or a pooler would: the server ends that session.
        assert reader.execute("SELECT pg_terminate_backend(%s)", [kept]).fetchone() == (True,)
        _wait_for(lambda: _heartbeat_backends(reader) == [], 2.0, "the session to end")
        before = _expires_at(reader)
        _wait_for(lambda: _expires_at(reader) > before, TTL, "a renewal on a new connection")
        (replacement,) = _heartbeat_backends(reader)
        assert replacement != kept
        assert not keeper.lost and not stopping.is_set(), keeper.lost_reason
        messages = [(r.levelno, r.getMessage()) for r in keeper_logs.records]
        assert [m for level, m in messages if level >= logging.WARNING] == []
        assert any("lease heartbeat's connection broke" in m for _, m in messages), messages


def test_the_connection_is_kept_while_a_keeper_runs_and_closed_when_none_does(
    heartbeat: lease_keeper._Heartbeat, reader: psycopg.Connection[Any]
) -> None:
    first_due = time.monotonic() + TTL / 3  # the keeper's first renewal is due then, or later
    keeper, _ = _started()
    second: LeaseKeeper | None = None
    try:
        # Nothing opened before the first renewal is due, a third of a ttl after the start (on
        # a busy machine it may be due, or done, by now: the heartbeat connects to make it).
        opened = _heartbeat_backends(reader)
        assert opened == [] or time.monotonic() >= first_due, "connected before renewing"
        kept = _connection_of_first_renewal(reader)
        renewed = _expires_at(reader)
        _wait_for(lambda: _expires_at(reader) > renewed, TTL, "a second renewal")
        assert _heartbeat_backends(reader) == [kept]  # between rounds too

        held = lease.acquire("job:other", "test:2:run", TTL, using=ALIAS)
        assert held is not None
        connections[ALIAS].close()
        second = LeaseKeeper(held, threading.Event())
        second.start()
        keeper.stop()
        time.sleep(TTL / 3 + 0.5)  # a round for the other keeper
        assert _heartbeat_backends(reader) == [kept], "one keeper left: still kept"
    finally:
        keeper.stop()
        if second is not None:
            second.stop()
    _wait_for(lambda: _heartbeat_backends(reader) == [], 2.0, "the idle heartbeat to disconnect")
