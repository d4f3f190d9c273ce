"""The job functions the connections benchmark's workers run (bench/connections_bench.py)."""

from __future__ import annotations

import time

from jobs import job
from jobs.context import JobContext


@job("bench.second")
def one_second(ctx: JobContext) -> None:
    """A 1 s job."""
    time.sleep(1.0)


@job("bench.twenty_seconds")
def twenty_seconds(ctx: JobContext) -> None:
    """A 20 s job: its lease is renewed every second while it runs."""
    ctx.stopping.wait(20.0)
