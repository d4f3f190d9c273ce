"""Job functions the tests schedule. Workers started by tests import this module through
JOBS_MODULES, so executions can be counted independently of the run table (an append-only
file per test)."""

from __future__ import annotations

import os
import time

from jobs import job
from jobs.context import JobContext


def _append(path: str, line: str) -> None:
    # O_APPEND writes of one short line are atomic across processes on Linux.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@job("tests.record")
def record(ctx: JobContext, log: str, seconds: float = 0.0) -> str:
    """Append one line per execution: run id, slot, token, pid; optionally work a while."""
    started = time.time()
    if seconds:
        ctx.stopping.wait(seconds)
    _append(
        log,
        f"{ctx.run_id} {ctx.scheduled_for.isoformat()} {ctx.fencing_token} {os.getpid()} "
        f"{started:.6f} {time.time():.6f}",
    )
    return "recorded"


@job("tests.fail")
def fail(ctx: JobContext) -> None:
    """Always raises."""
    raise ValueError("boom from tests.fail")


@job("tests.wait_for_stop")
def wait_for_stop(ctx: JobContext, seconds: float = 30.0) -> str:
    """Returns when ctx.stopping is set (or after ``seconds``)."""
    return "stopped" if ctx.stopping.wait(seconds) else "timed out"
