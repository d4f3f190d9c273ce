"""PeriodicThread: a failing step never ends the loop; a database error is one warning line."""

from __future__ import annotations

import logging
import threading

import pytest
from django.db import OperationalError

from jobs.process.background import PeriodicThread


class Steps(PeriodicThread):
    name = "jobs-test-steps"

    def __init__(self, failures: list[Exception]) -> None:
        super().__init__(interval=0.01)
        self.failures = failures
        self.done = threading.Event()
        self.prepared_on: int | None = None
        self.steps = 0

    def prepare(self) -> None:
        self.prepared_on = threading.get_ident()

    def step(self) -> None:
        self.steps += 1
        if self.failures:
            raise self.failures.pop(0)
        self.done.set()


def test_failing_steps_are_logged_and_the_loop_carries_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = Steps([OperationalError("server closed the connection"), RuntimeError("boom")])
    with caplog.at_level(logging.WARNING, logger="jobs.process.background"):
        loop.start()
        try:
            assert loop.done.wait(10), "the loop stopped after a failing step"
        finally:
            loop.stop()
    assert loop.started and not loop._thread.is_alive()
    assert loop.prepared_on == loop._thread.ident
    assert loop.steps >= 3
    database, other = caplog.records[:2]
    assert (database.levelname, database.getMessage()) == (
        "WARNING",
        "jobs-test-steps: server closed the connection",
    )
    assert database.exc_info is None, "an outage is one line, not a traceback per look"
    assert other.levelname == "ERROR" and other.exc_info is not None
