"""jobs.broker.broker_restart: kombu's Redis ``Channel.close`` finishes when its BRPOP connection is
gone, is wrapped once, and is left alone when kombu no longer looks as expected. The worker
surviving a real Redis restart: ``tests/acceptance/test_broker_restart.py``."""

from __future__ import annotations

from queue import Empty
from typing import Any

import pytest
import redis
from kombu.transport import redis as kombu_redis

from jobs.broker import broker_restart


class FakeChannel:
    """What the wrapper uses of kombu's Redis channel; ``close`` records that it ran."""

    _in_poll: Any = False
    connection_errors = (redis.exceptions.ConnectionError, OSError)

    def __init__(self, in_poll: bool, read_raises: BaseException | None) -> None:
        self._in_poll = object() if in_poll else False
        self.read_raises = read_raises
        self.reads = 0
        self.closed = False

    def _brpop_read(self) -> None:
        self.reads += 1
        self._in_poll = None  # as kombu's, in its finally
        if self.read_raises is not None:
            raise self.read_raises

    def close(self) -> None:
        assert not self._in_poll, "kombu's own close would read the BRPOP again"
        self.closed = True


@pytest.fixture
def channel_class(monkeypatch: pytest.MonkeyPatch) -> type[FakeChannel]:
    """A fresh fake Channel class, put in kombu's place for the test (restored after)."""
    fake = type("Channel", (FakeChannel,), {})
    monkeypatch.setattr(kombu_redis, "Channel", fake)
    return fake


@pytest.mark.parametrize(
    "read_raises",
    [redis.exceptions.ConnectionError("Connection closed by server."), Empty(), None],
    ids=["connection-gone", "no-message", "message"],
)
def test_the_close_runs_to_its_end_whatever_the_brpop_in_flight_gives(
    channel_class: type[FakeChannel], read_raises: BaseException | None
) -> None:
    assert broker_restart.install()
    channel = channel_class(in_poll=True, read_raises=read_raises)
    channel.close()
    assert channel.reads == 1 and channel.closed


def test_without_a_brpop_in_flight_only_kombus_close_runs(
    channel_class: type[FakeChannel],
) -> None:
    assert broker_restart.install()
    channel = channel_class(in_poll=False, read_raises=None)
    channel.close()
    assert channel.reads == 0 and channel.closed


def test_another_error_of_the_read_still_propagates(channel_class: type[FakeChannel]) -> None:
    assert broker_restart.install()
    channel = channel_class(in_poll=True, read_raises=ValueError("a bug, not a lost broker"))
    with pytest.raises(ValueError, match="a bug"):
        channel.close()
    assert not channel.closed


def test_installing_twice_wraps_once(channel_class: type[FakeChannel]) -> None:
    assert broker_restart.install()
    wrapped = channel_class.close
    assert broker_restart.install()
    assert channel_class.close is wrapped


def test_a_kombu_without_the_brpop_read_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Changed:
        def close(self) -> None:
            pass

    monkeypatch.setattr(kombu_redis, "Channel", Changed)
    original = Changed.close
    assert broker_restart.install() is False
    assert Changed.close is original


def test_the_installed_kombu_is_the_one_it_was_written_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real channel has what the wrapper relies on (a kombu upgrade that drops it fails
    here, so the defence is looked at again rather than silently skipped)."""
    monkeypatch.setattr(kombu_redis.Channel, "close", kombu_redis.Channel.close)  # restored after
    assert broker_restart.install()
    assert getattr(kombu_redis.Channel.close, "_jobs_survives_a_lost_broker", False)
