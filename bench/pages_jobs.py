"""The job function the pages benchmark's jobs point at (never run: the runs are filled in SQL)."""

from __future__ import annotations

from jobs import job
from jobs.context import JobContext


@job("bench.noop")
def noop(ctx: JobContext) -> None:
    """Does nothing."""
