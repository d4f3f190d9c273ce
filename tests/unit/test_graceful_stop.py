"""A stop asked for while a beat ticks is acted on once the tick ends (jobs.beat.graceful_stop)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from types import FrameType

import pytest

from jobs.beat.graceful_stop import stop_after_tick


@pytest.fixture
def celery_like_handler() -> Iterator[list[int]]:
    """A SIGTERM handler as celery beat installs one (it ends the process by raising), that
    records when it ran; the previous one put back afterwards."""
    calls: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        calls.append(signum)
        raise SystemExit()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield calls
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_sigterm_during_the_tick_is_handled_after_it(celery_like_handler: list[int]) -> None:
    done = []
    with pytest.raises(SystemExit), stop_after_tick():
        os.kill(os.getpid(), signal.SIGTERM)
        done.append("published")  # the rest of the tick still happens
        assert celery_like_handler == []
    assert done == ["published"]
    assert celery_like_handler == [signal.SIGTERM]


def test_a_tick_without_a_stop_leaves_the_handler_as_it_was(
    celery_like_handler: list[int],
) -> None:
    before = signal.getsignal(signal.SIGTERM)
    with stop_after_tick():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before
    assert celery_like_handler == []


def test_an_ignored_signal_stays_ignored() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with stop_after_tick():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
