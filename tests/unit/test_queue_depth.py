"""How many messages wait in a broker queue (jobs.upkeep.queue_depth): the broker's count, 0 for
a queue that does not exist, ``None`` (logged) when the broker cannot say; each channel closed."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from jobs.upkeep.queue_depth import waiting_messages


class NotFound(Exception):
    reply_code = 404


class Channel:
    def __init__(self, depths: dict[str, Any]) -> None:
        self.depths = depths
        self.closed = False

    def queue_declare(self, *, queue: str, passive: bool) -> tuple[str, int, int]:
        assert passive, "a depth is read, never a queue declared"
        depth = self.depths[queue]
        if isinstance(depth, Exception):
            raise depth
        return queue, depth, 0

    def close(self) -> None:
        if self.closed:
            raise RuntimeError("closed twice")
        self.closed = True


class Connection:
    def __init__(self, depths: dict[str, Any]) -> None:
        self.depths = depths
        self.channels: list[Channel] = []

    def channel(self) -> Channel:
        self.channels.append(Channel(self.depths))
        return self.channels[-1]


def test_each_queue_has_its_count_a_missing_one_none_waiting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    connection = Connection(
        {
            "busy": 12,
            "missing": NotFound("no queue"),
            "missing-on-redis": Exception("Channel error: NOT_FOUND - no queue 'x'"),
            "unreadable": ConnectionError("broker gone"),
        }
    )
    with caplog.at_level(logging.WARNING, logger="jobs.upkeep.queue_depth"):
        counts = waiting_messages(connection, ["busy", "missing", "missing-on-redis", "unreadable"])
    assert counts == {"busy": 12, "missing": 0, "missing-on-redis": 0, "unreadable": None}
    assert all(channel.closed for channel in connection.channels)
    (warning,) = caplog.records
    assert warning.queue == "unreadable"  # type: ignore[attr-defined]
    assert "broker gone" in warning.getMessage()


def test_no_queues_no_channel() -> None:
    connection = Connection({})
    assert waiting_messages(connection, []) == {}
    assert connection.channels == []
