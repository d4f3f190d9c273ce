"""The jobs the nemesis runs (tests/nemesis). Workers import this module through JOBS_MODULES.

Each execution appends its own history, independently of the run table: a ``start`` line once
the job function is called (the lease is held by then), and an ``end`` line after a last fenced
check, with the time just before that check (``fence``) and its outcome: ``committed`` (the
database accepted the token), ``rejected`` (it refused it) or ``unreachable``. A process killed
mid-run leaves a ``start`` alone. One JSON object a line (tests/nemesis/checker.py reads them).
"""

from __future__ import annotations

import json
import os
import time

from django.db import DatabaseError, connection

from jobs import job
from jobs.context import JobContext
from jobs.exceptions import LeaseLost
from tests.support.append_log import append_line


def _append(path: str, record: dict[str, object]) -> None:
    append_line(path, json.dumps(record, separators=(",", ":")))


def _line(ctx: JobContext, event: str, **fields: object) -> dict[str, object]:
    return {
        "e": event, "job": ctx.job_name, "slot": ctx.scheduled_for.isoformat(),
        "run": ctx.run_id, "token": ctx.fencing_token, "attempt": ctx.attempt,
        "key": ctx.lease_key, "pid": os.getpid(), **fields,
    }  # fmt: skip


def _fenced_check(ctx: JobContext, attempts: int = 2) -> str:
    """A connection cut under the job (the nemesis terminates them) is retried once, on a new
    one, as a job's own writes would be."""
    for _ in range(attempts):
        try:
            with ctx.fenced():
                pass
        except LeaseLost:
            return "rejected"
        except DatabaseError:
            connection.close()  # the next use reconnects
            continue
        return "committed"
    return "unreachable"


def _execute(ctx: JobContext, log: str, seconds: float) -> str:
    _append(log, _line(ctx, "start", t=time.time()))
    ctx.stopping.wait(seconds)
    fence = time.time()
    outcome = _fenced_check(ctx)
    _append(log, _line(ctx, "end", fence=fence, t=time.time(), outcome=outcome))
    if outcome != "committed":
        raise LeaseLost(f"the nemesis execution of run {ctx.run_id} ended {outcome}")
    return outcome


@job("tests.nemesis.work")
def work(ctx: JobContext, log: str, seconds: float = 0.0) -> str:
    """Works ``seconds`` (less when asked to stop), then checks its lease in a fenced block."""
    return _execute(ctx, log, seconds)


@job("tests.nemesis.guarded")
def guarded(ctx: JobContext, log: str, seconds: float = 0.0) -> str:
    """The same, for the guarded calls (one job runs it, so ``.delay()`` finds its job)."""
    return _execute(ctx, log, seconds)


@job("tests.nemesis.caller")
def caller(ctx: JobContext, log: str, seconds: float = 0.0) -> str:
    """Makes one guarded call of ``tests.nemesis.guarded`` from inside the cluster."""
    return str(guarded.delay(log=log, seconds=seconds).id)  # type: ignore[attr-defined]
