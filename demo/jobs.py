"""Demo jobs that `make run` loads (JOBS_MODULES=demo.jobs): one of each shape."""

from __future__ import annotations

import logging
import random
import time

from jobs import job
from jobs.context import JobContext

log = logging.getLogger(__name__)


@job("demo.quick", every="10s", start_deadline=60)
def quick(ctx: JobContext) -> dict[str, object]:
    """Finishes at once: the heartbeat of the demo."""
    return {"slot": ctx.scheduled_for.isoformat(), "token": ctx.fencing_token}


@job("demo.slow", every="20s", lease_ttl=15)
def slow(ctx: JobContext, seconds: float = 30.0) -> str:
    """Works longer than its interval, checking ctx.stopping so it can hand over cleanly: the
    slot after each run's start finds the lease held and is recorded ``skipped`` (overlap skip)."""
    deadline = time.monotonic() + seconds
    log.info("starting %.0f s of work", seconds)
    ticks = 0
    while time.monotonic() < deadline:
        if ctx.stopping.wait(0.5):
            log.warning("asked to stop: handing over")
            return "stopped early"
        ticks += 1
        if ticks % 10 == 0:  # every 5 s: its run's own log shows how far it got
            print(f"working: {max(deadline - time.monotonic(), 0):.0f} s left")
    return f"worked {seconds:.0f}s"


@job("demo.failing", every="30s")
def failing(ctx: JobContext) -> None:
    """Always raises, so the admin shows what a failure looks like (and what it logged first)."""
    log.info("checking the demo's upstream for slot %s", ctx.scheduled_for.isoformat())
    raise RuntimeError(f"demo failure for slot {ctx.scheduled_for.isoformat()}")


@job("demo.poller", continuous=True, lease_ttl=9)
def poller(ctx: JobContext) -> None:
    """A continuous job: polls until asked to stop."""
    while not ctx.stopping.wait(random.uniform(1.0, 2.0)):
        log.info("demo poller checked for work", extra={"job": ctx.job_name})
