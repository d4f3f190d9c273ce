"""Property-based fuzzing of the API (hypothesis, through the Django test client, with a valid
token), beyond the schema's fuzz (test_openapi.py):

- path parameters: every route of the URLconf under ``/api/``, with each method it allows,
  answers a NUL, a control character, a line separator or a very long value in any path
  parameter with a JSON 400 or 404. The routes come from the URLconf, so a new one is fuzzed
  without being listed;
- names and texts in bodies (a job's queue, calendar and upstreams; a blackout's name, job and
  description; a run's kwargs, keys and values), drawn from every code point, lone surrogates
  and NUL included: a 400 naming the field, or the value stored as sent (and read back so) and
  no stored name holding a control character.

Never a 500: the test client re-raises any exception a view lets through."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from hypothesis import given
from hypothesis import strategies as st

from jobs import services
from jobs.audit import Actor
from jobs.models import Blackout, Job, JobRun
from jobs.schedule.kinds import Every
from jobs.values.names import has_control_character
from jobs.web import tokens
from tests.support.fuzzing import any_text, fuzz_settings
from tests.support.hostile_values import UNENCODABLE

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

    @fuzz_settings(300)
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


# Names and texts of bodies, each with hostile values; hypothesis adds random text.
TEXTS: dict[str, list[Any]] = {
    "queue": ["default", "", " ", "q" * 101, *HOSTILE, *UNENCODABLE],
    "holiday_calendar": ["US", "", "XX", *HOSTILE, *UNENCODABLE],
    "after": [["first"], ["first", "first"], [""], *([text] for text in HOSTILE + UNENCODABLE)],
    "name": ["freeze", "", " ", "a/b", *HOSTILE, *UNENCODABLE],
    "job": ["fuzzed", None, "nope", *HOSTILE, *UNENCODABLE],
    "description": ["why", "", "x" * 2001, *HOSTILE, *UNENCODABLE],
    "kwargs": [{}, {"seconds": 0}, {"nope": 1}, *({"seconds": t} for t in UNENCODABLE)],
}
JOB_TEXTS = ("queue", "holiday_calendar", "after")
WINDOW_TEXTS = ("name", "job", "description")
WINDOW = {"starts_at": "2030-01-01T00:00:00Z", "ends_at": "2030-01-02T00:00:00Z"}


def test_names_and_texts_in_bodies_are_stored_as_sent_or_a_400_naming_the_field() -> None:
    secret = tokens.create("fuzz", actor=Actor.code("tests"))[1]
    api = Client(headers={"authorization": f"Bearer {secret}"})
    for name in ("first", "fuzzed"):
        services.create_job(
            services.JobDefinition(name=name, task="tests.record", schedule=Every(60),
                                   kwargs={"log": "-"}),
            actor=Actor.code("tests"),
        )  # fmt: skip

    @st.composite
    def bodies(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
        target = draw(st.sampled_from(["job", "blackout", "run"]))
        if target == "run":
            given = st.dictionaries(any_text(), any_text(), max_size=2)
            return target, {"kwargs": draw(st.one_of(st.sampled_from(TEXTS["kwargs"]), given))}
        names = JOB_TEXTS if target == "job" else WINDOW_TEXTS
        body: dict[str, Any] = {} if target == "job" else {**WINDOW, "name": "freeze"}
        for field in draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True)):
            random = st.lists(any_text(), max_size=2) if field == "after" else any_text()
            body[field] = draw(st.one_of(st.sampled_from(TEXTS[field]), random))
        return target, body

    keys = iter(range(10**6))

    @fuzz_settings(200)
    @given(sent=bodies())
    def request(sent: tuple[str, dict[str, Any]]) -> None:
        target, body = sent
        if target == "job":
            response = api.patch("/api/jobs/fuzzed", body, content_type="application/json")
        elif target == "blackout":
            response = api.post("/api/blackouts", body, content_type="application/json")
        else:
            key = f"fuzz-{next(keys)}"
            response = api.post("/api/jobs/fuzzed/runs", body, content_type="application/json",
                                headers={"idempotency-key": key})  # fmt: skip

        if response.status_code == 400:
            assert set(response.json()["fields"]) <= set(body), (body, response.json())
            return
        # What the server read: JSON's escapes of a surrogate pair are the one character.
        body = json.loads(json.dumps(body))
        assert response.status_code in (200, 201), (body, response.content[:300])
        if target == "job":
            stored = Job.objects.get(name="fuzzed")
            upstreams = [job.name for job in stored.upstreams.order_by("name")]
            for field in set(body) - {"after"}:
                assert getattr(stored, field) == body[field], field
            assert "after" not in body or upstreams == sorted(body["after"])
            assert not has_control_character(stored.queue + stored.holiday_calendar)
        elif target == "run":
            run = JobRun.objects.get(pk=response.json()["id"])
            assert run.kwargs in (None, {"log": "-", **body["kwargs"]}), body
        else:
            window = Blackout.objects.select_related("job").get(name=body["name"])
            assert window.description == body.get("description", "")
            assert (window.job and window.job.name) == body.get("job")
            assert not has_control_character(window.name)
            window.delete()  # the next example may add one of the same name

    request()
