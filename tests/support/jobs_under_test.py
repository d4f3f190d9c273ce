"""Job functions the tests schedule. Workers started by tests import this module through
JOBS_MODULES, so executions can be counted independently of the run table (an append-only
file per test)."""

from __future__ import annotations

import logging
import os
import sys
import time

from jobs import job
from jobs.context import JobContext
from tests.support.append_log import append_line


@job("tests.record")
def record(ctx: JobContext, log: str, seconds: float = 0.0) -> str:
    """Append one line per execution: run id, slot, token, pid; optionally work a while."""
    started = time.time()
    if seconds:
        ctx.stopping.wait(seconds)
    append_line(
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


# --- issue 4: the singleton guard -------------------------------------------------------------


def _interval_line(ctx: JobContext, started: float, note: str = "") -> str:
    return (
        f"{ctx.run_id} {ctx.scheduled_for.isoformat()} {ctx.fencing_token} {os.getpid()} "
        f"{started:.6f} {time.time():.6f} {note}".rstrip()
    )


@job("tests.by_city", lock_key="city:{city}")
def by_city(ctx: JobContext, log: str, city: str, seconds: float = 0.0) -> str:
    """One lease per city: a line per execution, like tests.record."""
    started = time.time()
    ctx.stopping.wait(seconds)
    append_line(log, _interval_line(ctx, started, ctx.lease_key))
    return city


@job("tests.by_region", lock_key=lambda log, region, seconds=0.0: f"region:{region.lower()}")
def by_region(ctx: JobContext, log: str, region: str, seconds: float = 0.0) -> str:
    """One lease per region, the key derived by a callable."""
    started = time.time()
    ctx.stopping.wait(seconds)
    append_line(log, _interval_line(ctx, started, ctx.lease_key))
    return region


@job("tests.hold")
def hold_while(ctx: JobContext, log: str, hold: str, limit: float = 120.0) -> str:
    """Runs while the file ``hold`` exists (ignoring ctx.stopping, like a job stuck in a call),
    then appends its line."""
    started = time.time()
    deadline = time.monotonic() + limit
    while os.path.exists(hold) and time.monotonic() < deadline:
        time.sleep(0.05)
    append_line(log, _interval_line(ctx, started))
    return "released"


@job("tests.fenced_write")
def fenced_write(
    ctx: JobContext, log: str, table: str, hold: str = "", limit: float = 120.0
) -> str:
    """Runs while the file ``hold`` exists, then writes (run id, token) to ``table`` through
    ctx.fenced(); appends "written" or "rejected" to ``log``."""
    from django.db import connection

    from jobs.exceptions import LeaseLost

    started = time.time()
    deadline = time.monotonic() + limit
    while hold and os.path.exists(hold) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        with ctx.fenced(), connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (run_id, token) VALUES (%s, %s)",
                [ctx.run_id, ctx.fencing_token],
            )
    except LeaseLost:
        append_line(log, _interval_line(ctx, started, "rejected"))
        raise
    append_line(log, _interval_line(ctx, started, "written"))
    return "written"


@job("tests.flaky")
def flaky(ctx: JobContext, log: str, failures: int) -> str:
    """Raises on its first ``failures`` attempts; a line per attempt."""
    append_line(log, _interval_line(ctx, time.time(), f"attempt={ctx.attempt}"))
    if ctx.attempt <= failures:
        raise RuntimeError(f"attempt {ctx.attempt} fails on purpose")
    return f"succeeded on attempt {ctx.attempt}"


@job("tests.keyed")
def keyed(ctx: JobContext, log: str, failures: int) -> None:
    """Writes its idempotency key per attempt; raises on its first ``failures`` attempts."""
    append_line(log, f"{ctx.attempt} {ctx.idempotency_key}")
    if ctx.attempt <= failures:
        raise RuntimeError(f"attempt {ctx.attempt} fails on purpose")


@job("tests.deaf")
def deaf(ctx: JobContext, seconds: float) -> str:
    """Ignores ctx.stopping: sleeps ``seconds`` whatever happens."""
    time.sleep(seconds)
    return "done"


# --- issue 14: alerts -----------------------------------------------------------------------------


@job("tests.fail_until")
def fail_until(ctx: JobContext, healed: str) -> str:
    """Raises until the file ``healed`` exists (a test makes the job succeed by creating it)."""
    if not os.path.exists(healed):
        raise RuntimeError(f"failing until {healed} exists")
    return "healed"


# --- issue 43: truthful outcomes ------------------------------------------------------------------


@job("tests.exit")
def exit_by(ctx: JobContext, how: str) -> None:
    """Ends the way ``how`` says: ``sys.exit`` (``sys.exit(1)``), ``SystemExit``,
    ``KeyboardInterrupt`` or ``WorkerTerminate`` (raised; Celery's hard shutdown raises it)."""
    from celery.exceptions import WorkerTerminate

    if how == "sys.exit":
        sys.exit(1)
    if how == "SystemExit":
        raise SystemExit("stopping from tests.exit")
    if how == "WorkerTerminate":
        raise WorkerTerminate(1)
    raise KeyboardInterrupt


@job("tests.returns")
def returns(ctx: JobContext, kind: str) -> object:
    """Returns a value JSON cannot hold, or ``jsonb`` cannot store."""
    return {"nan": float("nan"), "nul": "a\x00b", "set": {1}}[kind]


# --- issue 45: a run's own log -------------------------------------------------------------------

_talker = logging.getLogger("tests.talk")


@job("tests.talk")
def talk(
    ctx: JobContext, count: int, every: float = 0.0, log: str = "", prints: bool = False
) -> int:
    """Logs ``count`` lines (``line N at EPOCH``), one per ``every`` seconds (with ``prints``,
    every even one printed instead); with ``log``, appends ``N EPOCH`` to that file after each,
    so a test knows how far it got."""
    for number in range(1, count + 1):
        if number > 1 and every:
            time.sleep(every)  # the job's own pace; ctx.stopping is not this test's concern
        at = time.time()
        if prints and number % 2 == 0:
            print(f"line {number} at {at:.6f}")
        else:
            _talker.info("line %d at %.6f", number, at)
        if log:
            append_line(log, f"{number} {at:.6f}")
    return count


@job("tests.talk_every_way", log_level="DEBUG")
def talk_every_way(ctx: JobContext, secret_url: str) -> str:
    """A line at each level, printed lines (one without its line break), a secret, a traceback."""
    _talker.debug("a debug line")
    _talker.info("connecting to %s", secret_url)
    _talker.warning("a warning")
    print("printed to stdout")
    print("printed to stderr", file=sys.stderr)
    try:
        raise ValueError("caught here")
    except ValueError:
        _talker.exception("an exception")
    sys.stdout.write("no line break at the end")
    return "talked"
