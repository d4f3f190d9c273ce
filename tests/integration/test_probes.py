"""The probes answer first (jobs.web.probes): ``/livez``, ``/readyz``, ``/healthz`` and
``/metrics`` reach their views by any Host (ahead of host validation), only by GET or HEAD;
every other path goes down the middleware chain."""

from __future__ import annotations

import json

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory

from jobs.web.probes import PROBES, ProbeMiddleware

pytestmark = pytest.mark.django_db


def _rest_of_the_chain(request: HttpRequest) -> HttpResponse:
    return HttpResponse("the rest")


def test_the_probes_are_the_four_paths() -> None:
    assert set(PROBES) == {"/livez", "/readyz", "/healthz", "/metrics"}


def test_a_probe_answers_and_another_path_goes_on() -> None:
    middleware = ProbeMiddleware(_rest_of_the_chain)
    factory = RequestFactory()
    live = middleware(factory.get("/livez"))
    assert live.status_code == 200 and json.loads(live.content) == {"status": "ok"}
    assert middleware(factory.head("/livez")).status_code == 200
    assert middleware(factory.get("/admin/")).content == b"the rest"


def test_a_probe_refuses_other_methods() -> None:
    response = ProbeMiddleware(_rest_of_the_chain)(RequestFactory().post("/healthz"))
    assert response.status_code == 405 and response["Allow"] == "GET, HEAD"
    assert json.loads(response.content) == {"error": "POST is not allowed"}


def test_a_probe_answers_whatever_the_host() -> None:
    response = Client().get("/livez", HTTP_HOST="10.0.0.7:8000")  # no ALLOWED_HOSTS entry
    assert response.status_code == 200
