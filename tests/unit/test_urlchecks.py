"""A URL carrying a NUL character is refused before a view queries with it (jobs.web.urlchecks),
except under /api/, which names the parameter at fault itself."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory

from jobs.web.urlchecks import RefuseNulInUrl


def _answer(request: HttpRequest) -> HttpResponse:
    return HttpResponse("the view")


def test_a_nul_in_a_query_value_key_or_path_is_a_bad_request() -> None:
    refuse = RefuseNulInUrl(_answer)
    factory = RequestFactory()
    for request in (
        factory.get("/admin/jobs/jobrun/", {"node": "a\x00"}),
        factory.get("/admin/jobs/jobrun/", {"no\x00de": "a"}),
        factory.get("/admin/jobs/job\x00/"),
    ):
        response = refuse(request)
        assert response.status_code == 400
        assert b"%00" in response.content and response["Content-Type"] == "text/plain"


def test_other_urls_and_the_api_reach_their_view() -> None:
    refuse = RefuseNulInUrl(_answer)
    factory = RequestFactory()
    assert refuse(factory.get("/admin/jobs/jobrun/", {"node": "a"})).content == b"the view"
    assert refuse(factory.get("/api/v1/runs", {"node": "a\x00"})).content == b"the view"
