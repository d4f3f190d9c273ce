"""A 503 for a request the database cannot serve now: its connection pool stayed busy (the web's
budget, ``DATABASE_POOL_MAX_SIZE``: docs/connections.md), or the database is unreachable.

Django answers a database error a view raises with a 500 (a traceback page in debug); this
middleware answers connection errors (``OperationalError``, ``InterfaceError``) with a 503 JSON
body and ``Retry-After`` instead, as the API has always done (``jobs.web.api``): the admin and
the dashboard included. Other database errors (a constraint, bad data) stay 500s: they are bugs,
and a retry would not help.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

log = logging.getLogger(__name__)

# Seconds a client is told to wait before it tries again.
RETRY_AFTER = 1
UNREACHABLE = "the database is unavailable; retry later"


def pool_exhausted(error: BaseException) -> bool:
    """Whether ``error`` is the pool's: no connection became free in time (``PoolTimeout``), or
    too many requests already waited for one (``TooManyRequests``)."""
    try:
        from psycopg_pool import PoolTimeout, TooManyRequests
    except ImportError:  # the pool is not installed, so it is not in use
        return False
    cause = error if isinstance(error, PoolTimeout | TooManyRequests) else error.__cause__
    return isinstance(cause, PoolTimeout | TooManyRequests)


def busy_message() -> str:
    pool = (settings.DATABASES["default"].get("OPTIONS") or {}).get("pool") or {}
    timeout = pool.get("timeout", 30.0) if isinstance(pool, dict) else 30.0
    return (
        f"the server is busy: no database connection became free within {timeout:g} s; retry later"
    )


def answer(error: BaseException, *, what: str) -> JsonResponse:
    """The 503 for ``error``, logged: one line for a busy pool (under load there may be many,
    and each is expected), the traceback for anything else."""
    if pool_exhausted(error):
        message = busy_message()
        log.warning("%s: %s", what, error, extra={"action": "db_pool_exhausted"})
    else:
        message = UNREACHABLE
        log.error("%s failed on the database", what, exc_info=error, extra={"action": "web_db"})
    response = JsonResponse({"error": message}, status=503)
    response["Retry-After"] = str(RETRY_AFTER)
    response["Cache-Control"] = "no-store"
    return response


class DatabaseUnavailable:
    """Middleware: a view's connection error is a 503, never a 500."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, OperationalError | InterfaceError):
            return answer(exception, what=f"{request.method} {request.path}")
        return None
