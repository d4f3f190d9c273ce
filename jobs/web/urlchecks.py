"""Refuse a URL carrying a NUL character before any view puts it in a query.

PostgreSQL text cannot hold NUL, so a filter or search such as ``?node=%00`` in the admin would
fail in the database (a 500) instead of matching nothing. The JSON API is left to answer for
itself: it names the parameter at fault (``jobs.web.api.Query``).
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest

_MESSAGE = "Bad request: the URL contains a NUL character (%00), which no stored value can hold."


class RefuseNulInUrl:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith("/api/") and _has_nul(request):
            return HttpResponseBadRequest(_MESSAGE, content_type="text/plain")
        return self.get_response(request)


def _has_nul(request: HttpRequest) -> bool:
    if "\x00" in request.path:
        return True
    return any("\x00" in key + "".join(values) for key, values in request.GET.lists())
