"""Shared fixtures. Settings come from the environment that `make test` (devtools) prepares."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _forget_held_tokens() -> Iterator[None]:
    """Each test's database hands out tokens from 1 again: what a worker process remembers of
    the tokens it held (jobs.guard.token_watch) must not pass from one test to the next, where
    it would read as a database that went back."""
    from jobs.guard import token_watch

    token_watch.reset()
    yield


@pytest.fixture(autouse=True)
def _close_the_run_log_writer() -> Iterator[None]:
    """A run executed in the test process leaves the run log's writer thread holding a
    connection for a moment (jobs.runlog.writer): closed after each test, so no connection of it
    outlives the test database."""
    yield
    from jobs.runlog.writer import WRITER

    WRITER.shutdown()
