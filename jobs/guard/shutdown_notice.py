"""A worker's shutdown, told to the runs executing in each of its processes: ``ctx.stopping`` is
set in every run under way when the worker is asked to stop (a warm shutdown: SIGTERM to its
main process, or Ctrl-C), so a long job can end early instead of holding the deploy up until it
finishes (docs/design.md: ``stopping`` is set when the lease is lost or the node shuts down).

More in docs/architecture.md, "Module notes".
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

# Set in a process once its worker began shutting down.
shutting_down = threading.Event()

_lock = threading.Lock()
_watched: set[threading.Event] = set()  # the ctx.stopping of each run executing here
_read_fd: int | None = None
_write_fd: int | None = None
_main_pid = 0  # the process that opened the pipe: the worker's main process


def open_before_fork(**_kwargs: object) -> None:
    """In the worker's main process, before the pool forks (``worker_init``)."""
    global _read_fd, _write_fd, _main_pid
    if _write_fd is None:
        _read_fd, _write_fd = os.pipe()
        _main_pid = os.getpid()


def listen_in_pool_process(**_kwargs: object) -> None:
    """In each pool process as it starts (``worker_process_init``)."""
    global _write_fd
    if os.getpid() == _main_pid:
        # The solo pool sends worker_process_init in the main process itself: closing the write
        # end here would announce a shutdown at once. Runs there are told directly.
        return
    if _write_fd is not None:
        # Only the main process may hold a write end, or closing it would not end the file.
        os.close(_write_fd)
        _write_fd = None
    if _read_fd is not None:
        threading.Thread(
            target=_wait_for_end_of_file, args=(_read_fd,), name="shutdown-notice", daemon=True
        ).start()


def announce_from_main_process(**_kwargs: object) -> None:
    """In the worker's main process when it starts shutting down (``worker_shutting_down``,
    called from its signal handler: closing a file descriptor and setting events is all)."""
    global _write_fd
    if _write_fd is not None:
        os.close(_write_fd)
        _write_fd = None
    _tell_runs()


@contextmanager
def watching(stopping: threading.Event) -> Iterator[None]:
    """While the block runs, the worker's shutdown sets ``stopping`` (at once if it began)."""
    with _lock:
        _watched.add(stopping)
    if shutting_down.is_set():
        stopping.set()
    try:
        yield
    finally:
        with _lock:
            _watched.discard(stopping)


def _wait_for_end_of_file(fd: int) -> None:
    while True:
        try:
            if os.read(fd, 1):
                continue  # nobody writes; end-of-file is the only message
        except InterruptedError:
            continue
        except OSError:
            return
        break
    log.info(
        "the worker is shutting down: runs under way are asked to stop",
        extra={"action": "shutdown_notice"},
    )
    _tell_runs()


def _tell_runs() -> None:
    shutting_down.set()
    with _lock:
        watched = list(_watched)
    for stopping in watched:
        stopping.set()
