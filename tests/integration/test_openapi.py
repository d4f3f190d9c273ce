"""The OpenAPI document matches the API, and fuzzing every operation from it (schemathesis,
in-process through the WSGI application, bounded examples) finds no server error and no answer
that contradicts the document."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.urls import URLPattern, URLResolver, get_resolver
from hypothesis import given
from schemathesis import GenerationMode
from schemathesis.core.result import Ok

from jobs.audit import Actor
from jobs.models import Job, JobRun
from jobs.web import tokens
from project.wsgi import application
from tests.support.fuzzing import fuzz_settings

pytestmark = pytest.mark.django_db

EXAMPLES_PER_OPERATION = 25


@pytest.fixture
def wsgi_keeps_the_test_connection() -> Iterator[None]:
    """Like Django's test client: a request must not close the connection that holds the
    test's transaction."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def _api_routes(patterns: Any = None, prefix: str = "") -> set[str]:
    """``/api/...`` routes of the URLconf (through its includes), with ``{name}`` for each path
    converter."""
    routes: set[str] = set()
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        path = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            routes |= _api_routes(pattern.url_patterns, path)
        elif isinstance(pattern, URLPattern) and path.startswith("api/"):
            routes.add("/" + re.sub(r"<str:(\w+)>", r"{\1}", path))
    return routes


def test_every_api_route_is_described_and_nothing_else(client) -> None:
    document = client.get("/api/openapi.json").json()

    assert set(document["paths"]) == _api_routes()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.usefixtures("wsgi_keeps_the_test_connection")
def test_fuzzing_finds_no_server_error_and_no_undocumented_answer(
    make_job: Callable[..., Job], mode: GenerationMode
) -> None:
    job = make_job("fuzzed")
    make_job("continuous", schedule=None)
    JobRun.objects.create(job=job, scheduled_for=job.created_at, error="boom")
    _token, secret = tokens.create("fuzz", actor=Actor.code("tests"))
    auth = {"Authorization": f"Bearer {secret}"}
    schema = schemathesis.openapi.from_wsgi("/api/openapi.json", application)

    operations = [result.ok() for result in schema.get_all_operations() if isinstance(result, Ok)]
    assert len(operations) == 20  # every operation but GET of the document itself
    for operation in operations:
        targets: list[dict[str, str] | None] = [None]
        if "{name}" in operation.path:
            targets.append({"name": "fuzzed"})  # a job that exists, not only random names
        for path_parameters in targets:
            strategy = operation.as_strategy(generation_mode=mode, path_parameters=path_parameters)

            @fuzz_settings(EXAMPLES_PER_OPERATION)
            @given(case=strategy)
            def call(case: schemathesis.Case) -> None:
                if not Job.objects.filter(name="fuzzed").exists():
                    make_job("fuzzed")  # deleted by a DELETE case: the next cases find it again
                # A schema cannot say "soft_time_limit below time_limit": such bodies are
                # valid by the schema and rightly refused (400), so that check is left out.
                # Every call carries a valid token (``headers=auth`` replaces whatever the case
                # generated), so a case made "negative" only by a missing or broken
                # Authorization header is in fact valid: "negative data rejected" is left out
                # too. What stays: no 5xx, and every answer documented (status, content type,
                # body schema).
                case.call_and_validate(
                    headers=auth,
                    excluded_checks=[
                        schemathesis.checks.positive_data_acceptance,
                        schemathesis.checks.negative_data_rejection,
                    ],
                )

            call()
