"""A view's connection error is a 503 with Retry-After (jobs.web.unavailable); other database
errors are bugs and stay 500s."""

from __future__ import annotations

import json

import psycopg
import pytest
from django.db import IntegrityError, InterfaceError, OperationalError
from django.http import HttpResponse
from django.test import RequestFactory
from psycopg_pool import PoolTimeout, TooManyRequests

from jobs.web.unavailable import DatabaseUnavailable, pool_exhausted


def _wrapped(cause: Exception, kind: type[Exception] = OperationalError) -> Exception:
    """As Django raises it: its own class, the driver's error as the cause."""
    try:
        raise kind(str(cause)) from cause
    except kind as exc:
        return exc


def _answer(exc: Exception) -> HttpResponse | None:
    middleware = DatabaseUnavailable(lambda request: HttpResponse())
    return middleware.process_exception(RequestFactory().get("/admin/jobs/job/"), exc)


@pytest.mark.parametrize(
    "cause",
    [
        PoolTimeout("couldn't get a connection after 5.00 sec"),
        TooManyRequests("the pool has already 4 requests waiting"),
    ],
)
def test_a_busy_pool_is_a_503_naming_it(cause: Exception) -> None:
    exc = _wrapped(cause)
    assert pool_exhausted(exc)
    response = _answer(exc)
    assert response is not None and response.status_code == 503
    assert response["Retry-After"] == "1"
    assert json.loads(response.content)["error"].startswith(
        "the server is busy: no database connection became free within"
    )


@pytest.mark.parametrize("kind", [OperationalError, InterfaceError])
def test_an_unreachable_database_is_a_503(kind: type[Exception]) -> None:
    exc = _wrapped(psycopg.OperationalError("connection refused"), kind)
    assert not pool_exhausted(exc)
    response = _answer(exc)
    assert response is not None and response.status_code == 503
    assert json.loads(response.content) == {"error": "the database is unavailable; retry later"}


def test_other_database_errors_are_left_to_django() -> None:
    assert _answer(_wrapped(psycopg.errors.UniqueViolation("dup"), IntegrityError)) is None
    assert _answer(ValueError("a bug")) is None
