"""Django ``@task`` functions (Django 6's Tasks framework) of the project's backend,
``jobs.django_tasks.backend.ClusterTaskBackend`` (project/settings.py's ``TASKS``), written as
Django's docs write them. Imported only on Django 6 (the tests importorskip ``django.tasks``)."""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.tasks import task  # type: ignore[import-not-found,unused-ignore]

from jobs.django_tasks import guarded

# How long a task waits for its release file before it gives up (a test that forgot it).
RELEASE_TIMEOUT = 60.0


def _append(log: str, line: str) -> None:
    with open(log, "a") as f:
        f.write(line + "\n")


def _wait_for(release: str) -> None:
    deadline = time.monotonic() + RELEASE_TIMEOUT
    while not Path(release).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{release} never appeared")
        time.sleep(0.02)


@task
def add(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b


@task
def boom(message: str) -> None:
    """Always raises."""
    raise ValueError(message)


@task
async def double(x: int) -> int:
    """A coroutine function."""
    return 2 * x


@task(takes_context=True)
def introspect(context: Any, note: str = "") -> dict[str, Any]:
    """Returns what Django's context says of this attempt."""
    result = context.task_result
    return {"attempt": context.attempt, "id": result.id, "status": str(result.status), "note": note}


@task
def span(log: str, note: str, release: str = "") -> str:
    """Appends "note start end pid" once ``release`` exists (at once without one)."""
    start = time.time()
    if release:
        _wait_for(release)
    _append(log, f"{note} {start:.6f} {time.time():.6f} {os.getpid()}")
    return note


@guarded(lock_key="city:{city}")
@task
def sync_city(log: str, city: str, release: str = "") -> str:
    """One run at a time per city (the job's overlap policy, skip, settles the others)."""
    if release:
        _wait_for(release)
    _append(log, city)
    return city


@guarded(max_retries=1, retry_backoff=1)
@task
def flaky(log: str) -> int:
    """Fails on its first attempt, succeeds on the next (one retry declared)."""
    attempts = len(Path(log).read_text().splitlines()) if Path(log).exists() else 0
    _append(log, "attempt")
    if attempts == 0:
        raise RuntimeError("first attempt fails")
    return attempts + 1


@task(priority=100)
def urgent() -> str:
    """Declared with Django's highest priority."""
    return "urgent"


@task
def exit_by(how: str) -> None:
    """Ends the way ``how`` says: ``sys.exit`` (``sys.exit(1)``), or ``KeyboardInterrupt``."""
    if how == "sys.exit":
        sys.exit(1)
    raise KeyboardInterrupt


@task
def give_back(kind: str) -> Any:
    """Returns a value of the ``kind`` asked for (one JSON holds, or one it cannot)."""
    values = {
        "bytes": b"abc",
        "tuple": (1, (2, b"x")),
        "datetime": datetime(2026, 1, 2, tzinfo=UTC),
        "lambda": lambda: None,
        "nan": float("nan"),
        "non-utf8": b"\xff",
    }
    return values[kind]


@task
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Returns its arguments as it received them."""
    return {"args": args, "kwargs": kwargs, "types": [type(arg).__name__ for arg in args]}
