"""Property-based fuzzing of the API's path parameters (hypothesis, through the Django test
client, with a valid token): every route of the URLconf under ``/api/``, with each method it
allows, answers a NUL, a control character, a line separator or a very long value in any path
parameter with a JSON 400 or 404; never a 500 (the test client re-raises any exception a view
lets through). The routes come from the URLconf, so a new one is fuzzed without being listed."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.audit import Actor
from jobs.web import tokens

pytestmark = pytest.mark.django_db

# Values that broke an edge once or sit on a limit; hypothesis adds random text.
HOSTILE = [
    "\x00",
    "a\x00b",
    "a\nb",
    "\r\n",
    "a\u2028b",
    "\u2029",
    "\x1b[2J",
    "\x7f",
    "\x85",
    " ",
    "..",
    "%",
    "a/b",
    "x" * 5000,
    "9" * 5000,
    "9" * 20,
    "-1",
    "٣",
]
# Any text a client could send: encodable in UTF-8 (no lone surrogates).
VALUES = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=40),
)


def _api_routes(patterns: Any = None, prefix: str = "") -> list[str]:
    """The ``/api/`` routes of the URLconf that take path parameters, as written there."""
    routes: list[str] = []
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            routes += _api_routes(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern) and route.startswith("api/") and "<" in route:
            routes.append(route)
    return routes


def _path(route: str, value: str) -> str:
    return "/" + re.sub(r"<(?:\w+:)?\w+>", quote(value, safe=""), route)


def test_every_route_answers_hostile_path_parameters_with_400_or_404() -> None:
    secret = tokens.create("fuzz", actor=Actor.code("tests"))[1]
    api = Client(headers={"authorization": f"Bearer {secret}"})
    routes = _api_routes()
    assert len(routes) >= 7, routes  # jobs/{name} and its four, runs/{run_id}, blackouts/{name}
    calls = [
        (route, method)
        for route in routes
        for method in api.options(_path(route, "x"))["Allow"].split(", ")
        if method != "OPTIONS"
    ]

    @settings(
        max_examples=300,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(call=st.sampled_from(calls), value=VALUES)
    def request(call: tuple[str, str], value: str) -> None:
        route, method = call
        response = api.generic(method, _path(route, value), headers={"idempotency-key": "k"})

        # No job, run or window is named so; a slash may lead to another route's method.
        expected = (400, 404, 405) if "/" in value else (400, 404)
        assert response.status_code in expected, (method, route, value, response.content[:200])
        if method != "HEAD":
            assert "error" in response.json()

    request()
