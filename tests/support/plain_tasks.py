"""Plain Celery tasks, written as any Django project writes them (``@shared_task``, no ``@job``):
the tests schedule them as jobs and adopt django-celery-beat rows that name them. Workers import
this module through JOBS_MODULES; each execution appends one line to a file, so executions are
counted on the task's own side, independently of the run table."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from celery import Task, shared_task

from jobs.calls import GuardedTask
from jobs.context import JobContext
from jobs.exceptions import LeaseLost
from tests.support.append_log import append_line


@shared_task
def append(log: str, note: str = "", seconds: float = 0.0) -> str:
    """Append a line (note, pid, time); optionally work a while first."""
    if seconds:
        time.sleep(seconds)
    append_line(log, f"{note} {os.getpid()} {time.time():.6f}")
    return note


@shared_task(bind=True)
def bound(self: Task, log: str, note: str = "") -> str:
    """A ``bind=True`` task: it receives itself first."""
    append_line(log, f"{note} {self.name}")
    return self.name


@shared_task(bind=True)
def request_headers(self: Task, log: str) -> None:
    """A ``bind=True`` task that appends, as JSON, what its request says of its message's custom
    headers: ``periodic_task_name`` (django-celery-beat's), ``tenant``, and all of them."""
    request = self.request
    seen = {
        "periodic_task_name": getattr(request, "periodic_task_name", None),
        "tenant": getattr(request, "tenant", None),
        "headers": request.headers,
    }
    append_line(log, json.dumps(seen, sort_keys=True))


@shared_task
def with_ctx(log: str, seconds: float = 0.0, *, ctx: JobContext | None = None) -> Any:
    """Asks for the run's context (a keyword-only ``ctx``): waits on ``ctx.stopping``."""
    assert ctx is not None, "the runner gives ctx to a task that declares it"
    stopped = ctx.stopping.wait(seconds) if seconds else False
    append_line(log, f"{ctx.run_id} {ctx.fencing_token} {ctx.lease_key} {stopped}")
    return {"run_id": ctx.run_id, "token": ctx.fencing_token, "stopped": stopped}


@shared_task
def fenced_write(log: str, seconds: float = 30.0, *, ctx: JobContext) -> str:
    """Once ``ctx.stopping`` is set (or after ``seconds``), tries a write under ``ctx.fenced()``
    and appends whether it was let through."""
    ctx.stopping.wait(seconds)
    try:
        with ctx.fenced():
            outcome = "written"
    except LeaseLost:
        outcome = "fenced out"
    append_line(log, outcome)
    return outcome


@shared_task
def boom() -> None:
    """Always raises."""
    raise RuntimeError("boom from a plain task")


# Guarded tasks (jobs.calls): their .delay() calls share their job's lease. Each writes one line
# per execution, "note start end pid", so tests read from the task's own side whether two
# executions overlapped.


def _span(log: str, note: str, seconds: float) -> str:
    start = time.time()
    if seconds:
        time.sleep(seconds)
    append_line(log, f"{note} {start:.6f} {time.time():.6f} {os.getpid()}")
    return note


@shared_task(base=GuardedTask)
def guarded_span(log: str, note: str = "", seconds: float = 0.0) -> str:
    """One call at a time with the job's runs (the job's own lock key)."""
    return _span(log, note, seconds)


@shared_task(base=GuardedTask, lock_key="city:{city}")
def guarded_city(log: str, city: str, seconds: float = 0.0) -> str:
    """One call at a time per city (celery-singleton's unique_on, celery-once's keys)."""
    return _span(log, city, seconds)


@shared_task(base=GuardedTask, raise_on_duplicate=True)
def guarded_once(log: str, note: str = "", seconds: float = 0.0) -> str:
    """A call while another holds or waits for the lease raises DuplicateCall."""
    return _span(log, note, seconds)


@shared_task(base=GuardedTask)
def guarded_boom(log: str, note: str = "") -> None:
    """Always raises (its retries keep the call's arguments)."""
    append_line(log, note)
    raise RuntimeError(f"boom {note}")
