"""A worker's shutdown told to its runs (jobs.guard.shutdown_notice): ``ctx.stopping`` of every
run under way is set when the worker's main process starts shutting down, in the main process
itself (the solo pool) and, through the end of a pipe, in each forked pool process."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from jobs.guard import shutdown_notice


@pytest.fixture(autouse=True)
def fresh_process_state() -> Iterator[None]:
    """Each test starts as a worker that has not begun shutting down, and leaves no pipe open."""
    yield
    for name in ("_read_fd", "_write_fd"):
        fd = getattr(shutdown_notice, name)
        if fd is not None:
            os.close(fd)
            setattr(shutdown_notice, name, None)
    shutdown_notice._main_pid = 0
    shutdown_notice.shutting_down.clear()
    with shutdown_notice._lock:
        shutdown_notice._watched.clear()


def test_the_shutdown_sets_stopping_of_each_run_under_way_only() -> None:
    running, finished = threading.Event(), threading.Event()
    with shutdown_notice.watching(finished):
        pass
    with shutdown_notice.watching(running):
        assert not running.is_set()
        shutdown_notice.announce_from_main_process()
        assert running.is_set()
    assert not finished.is_set()
    assert shutdown_notice.shutting_down.is_set()


def test_a_run_that_starts_after_the_shutdown_began_is_told_at_once() -> None:
    shutdown_notice.announce_from_main_process()
    stopping = threading.Event()
    with shutdown_notice.watching(stopping):
        assert stopping.is_set()


def test_the_solo_pool_keeps_the_pipe_open_until_its_main_process_announces() -> None:
    """The solo pool sends worker_process_init in the main process: no shutdown then."""
    shutdown_notice.open_before_fork()
    shutdown_notice.listen_in_pool_process()
    stopping = threading.Event()
    with shutdown_notice.watching(stopping):
        assert not shutdown_notice.shutting_down.is_set() and not stopping.is_set()
        shutdown_notice.announce_from_main_process()
        assert stopping.is_set()


def test_opening_twice_keeps_the_first_pipe() -> None:
    shutdown_notice.open_before_fork()
    first = (shutdown_notice._read_fd, shutdown_notice._write_fd)
    shutdown_notice.open_before_fork()
    assert (shutdown_notice._read_fd, shutdown_notice._write_fd) == first


@pytest.mark.skipif(not hasattr(os, "fork"), reason="pool processes are forked")
def test_a_forked_pool_process_is_told_when_the_main_process_announces() -> None:
    shutdown_notice.open_before_fork()
    ready_read, ready_write = os.pipe()  # the child says it is watching, then how it ended
    child = os.fork()
    if child == 0:  # the pool process
        code = 1
        try:
            os.close(ready_read)
            shutdown_notice.listen_in_pool_process()
            stopping = threading.Event()
            with shutdown_notice.watching(stopping):
                os.write(ready_write, b"w")
                code = 0 if stopping.wait(30) else 2
        finally:
            os._exit(code)
    os.close(ready_write)
    try:
        assert os.read(ready_read, 1) == b"w"
        assert not shutdown_notice.shutting_down.is_set()
        shutdown_notice.announce_from_main_process()
        _, status = os.waitpid(child, 0)
    finally:
        os.close(ready_read)
    assert os.waitstatus_to_exitcode(status) == 0, "the pool process's run was not told"
