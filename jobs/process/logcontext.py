"""Structured logs: every line logged while a run executes carries its run id, job, slot,
fencing token and node, and ``JOBS_LOG_FORMAT=json`` prints each line as one JSON object.

The runner binds the fields (``bound_run`` around ``execute_run``, ``bind`` as it learns the job,
slot and token); ``RunContextFilter`` copies them onto every record, so job code's own
``logging`` calls carry them too. A context variable, so threads and tasks never mix runs up
(a thread the job starts itself begins with no run fields).

This module is loaded by ``LOGGING`` before Django's apps are ready: it imports no models.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from functools import wraps
from typing import Any, TypeVar

RUN_FIELDS = ("run_id", "job", "slot", "token", "node")

_context: ContextVar[Mapping[str, Any] | None] = ContextVar("jobs_run_log_context", default=None)

T = TypeVar("T")

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys()) | {
    "message",
    "asctime",
    "taskName",
}


def current() -> Mapping[str, Any]:
    """The fields bound for the run executing in this context (empty outside a run)."""
    return _context.get() or {}


@contextmanager
def run_context(**fields: Any) -> Iterator[None]:
    """Bind ``fields`` (e.g. ``run_id``, ``node``) for the duration of the block."""
    token = _context.set({**current(), **fields})
    try:
        yield
    finally:
        _context.reset(token)


def bind(**fields: Any) -> None:
    """Add fields to the current run's context as they become known (job, slot, token).
    Outside ``run_context`` this does nothing, so it is safe to call anywhere."""
    fields = {key: value for key, value in fields.items() if value is not None}
    if _context.get() is not None:
        _context.set({**current(), **fields})


def bound_run(func: Callable[..., T]) -> Callable[..., T]:
    """Decorates ``execute_run(run_id, *, task_id, node)``: its lines carry run id and node."""

    @wraps(func)
    def wrapper(run_id: int, *args: Any, **kwargs: Any) -> T:
        with run_context(run_id=run_id, node=kwargs.get("node")):
            return func(run_id, *args, **kwargs)

    return wrapper


class RunContextFilter(logging.Filter):
    """Copies the bound run fields onto each record (``extra=`` given at the call wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in current().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    return str(value)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the run fields and any
    ``extra=`` fields; ``exc_info`` as ``exception``."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in data:
                data[key] = _jsonable(value)
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            data["stack"] = self.formatStack(record.stack_info)
        return json.dumps(data, ensure_ascii=False)
