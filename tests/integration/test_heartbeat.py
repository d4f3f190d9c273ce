"""A beat's heartbeat (jobs.beat.heartbeat), against real PostgreSQL: the row each beat process
writes at most once per interval, with absolute tick totals, and the tick decorator that feeds
it."""

from __future__ import annotations

import os

import pytest
from django.db import DatabaseError

from jobs.beat import heartbeat
from jobs.broker import broker_identity
from jobs.models import BeatHeartbeat

pytestmark = pytest.mark.django_db


def test_the_recorder_writes_at_most_once_per_interval() -> None:
    recorder = heartbeat.BeatHeartbeatRecorder(interval=3600)
    recorder.tick(0.5)
    recorder.tick(0.25)
    recorder.tick(1.0)

    row = BeatHeartbeat.objects.get(name=recorder.name)
    assert (row.ticks, row.tick_seconds, row.max_tick_seconds) == (1, 0.5, 0.5)

    recorder.interval = 0
    recorder.tick(0.25)
    row.refresh_from_db()
    assert (row.ticks, row.tick_seconds, row.max_tick_seconds) == (4, 2.0, 1.0)


def test_timed_beat_tick_records_even_when_the_tick_raises() -> None:
    @heartbeat.timed_beat_tick
    def tick() -> float:
        raise RuntimeError("tick failed")

    with pytest.raises(RuntimeError):
        tick()

    recorder = heartbeat.beat_recorder()
    assert BeatHeartbeat.objects.get(name=recorder.name).ticks >= 1


def test_a_failed_heartbeat_write_does_not_stop_the_beat(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = heartbeat.BeatHeartbeatRecorder(interval=5.0)

    def refuse() -> None:
        raise DatabaseError("database is down")

    monkeypatch.setattr(recorder, "write", refuse)
    monkeypatch.setattr(heartbeat.connection, "close", lambda: None)
    recorder.tick(0.1)

    assert "beat heartbeat not recorded" in caplog.text
    assert recorder.ticks == 1


def test_each_write_updates_the_processs_one_row_and_keeps_its_start() -> None:
    recorder = heartbeat.BeatHeartbeatRecorder(interval=0)
    recorder.configuration = "release-1"
    recorder.tick(0.5)
    first = BeatHeartbeat.objects.get(name=recorder.name)
    assert recorder.name == f"{recorder.host}:{os.getpid()}"
    assert (first.host, first.pid, first.started_at) == (
        recorder.host,
        os.getpid(),
        recorder.started_at,
    )
    assert (first.configuration, first.broker) == ("release-1", broker_identity.current())
    recorder.configuration = "release-2"
    recorder.tick(0.25)
    second = BeatHeartbeat.objects.get(name=recorder.name)
    assert (second.ticks, second.configuration) == (2, "release-2")
    assert second.started_at == first.started_at and second.last_seen >= first.last_seen
    assert BeatHeartbeat.objects.count() == 1


def test_a_failed_write_is_retried_after_an_interval_not_at_the_next_tick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(heartbeat.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(heartbeat.connection, "close", lambda: None)
    recorder = heartbeat.BeatHeartbeatRecorder(interval=5.0)
    attempts: list[int] = []

    def refuse() -> None:
        attempts.append(recorder.ticks)
        raise DatabaseError("database is down")

    monkeypatch.setattr(recorder, "write", refuse)
    recorder.tick(0.1)
    clock[0] += 4.0
    recorder.tick(0.1)
    assert attempts == [1]
    clock[0] += 1.0
    recorder.tick(0.1)
    assert attempts == [1, 3]


def test_the_process_has_one_recorder_and_a_forked_child_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(heartbeat, "_recorder", None)
    recorder = heartbeat.beat_recorder()
    assert heartbeat.beat_recorder() is recorder
    monkeypatch.setattr(heartbeat.os, "getpid", lambda: recorder.pid + 1)
    child = heartbeat.beat_recorder()
    assert child is not recorder and child.pid == recorder.pid + 1


def test_timed_beat_tick_returns_the_ticks_value_and_counts_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(heartbeat, "_recorder", None)

    @heartbeat.timed_beat_tick
    def tick(interval: float) -> float:
        return interval

    assert tick(2.5) == 2.5
    assert tick.__name__ == "tick"
    recorder = heartbeat.beat_recorder()
    assert recorder.ticks == 1 and recorder.tick_seconds >= 0
