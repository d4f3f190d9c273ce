"""Racing one call against itself: the same call on several threads, released together."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from django.db import connection

T = TypeVar("T")


def at_once(count: int, call: Callable[[], T], timeout: float) -> list[T]:
    """``call()`` on ``count`` threads that start it together, each on a connection of its own
    (closed after); waits ``timeout`` seconds for each thread. The results, in the order the
    calls returned."""
    start = threading.Barrier(count)
    results: list[T] = []

    def work() -> None:
        try:
            start.wait()
            results.append(call())
        finally:
            connection.close()

    threads = [threading.Thread(target=work) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    return results
