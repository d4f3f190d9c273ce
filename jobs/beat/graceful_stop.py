"""A beat told to stop while it ticks stops once the tick is done.

A tick records slots and then publishes them (guarantee 1: only the insert's winner publishes).
Celery beat's SIGTERM and SIGINT handler raises ``SystemExit`` wherever the main thread is, so a
beat stopped by a deploy between the two would leave the runs it recorded unpublished until
another beat's maintenance re-publishes them, ``JOBS_REPUBLISH_AFTER`` later, or, with no other
beat, until it starts again. While a tick runs, those signals are held and handled when it ends
(a tick is bounded: its statements time out, a burst's chunks are confirmed or given up).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stop_after_tick() -> Iterator[None]:
    """Hold SIGTERM and SIGINT during the block; act on the first that came, once it ends, as
    the handler in place before would have. Only where Python handles signals (the main
    thread: ``celery beat``); a beat embedded in a worker (``-B``) stops as its worker does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[tuple[int, FrameType | None]] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        held.append((signum, frame))

    # The signals that would stop the beat (an ignored one stays ignored), and their handlers.
    previous = {
        signum: handler
        for signum in STOP_SIGNALS
        if (handler := signal.getsignal(signum)) is not signal.SIG_IGN and handler is not None
    }
    for signum in previous:
        signal.signal(signum, hold)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if held:
            first, frame = held[0]
            handler = previous[signal.Signals(first)]
            if callable(handler):
                handler(first, frame)  # Celery's: save the schedule, SystemExit
            else:
                signal.raise_signal(first)  # the default action, now that it is back
