"""The middleware that answers probes and scrapes first: ``/livez``, ``/readyz``, ``/healthz``
and ``/metrics``.

It sits at the top of ``MIDDLEWARE`` so that a load balancer, a compose healthcheck or
Prometheus can reach these by IP or container name: host validation (``ALLOWED_HOSTS``) and the
HTTPS redirect would otherwise answer them with 400 or 301. Nothing here reads the Host header.
``/metrics`` and the probes' details are for those ``jobs.web.access`` lets see the internals.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse

from jobs.web import health, metrics

PROBES: dict[str, Callable[[HttpRequest], HttpResponse]] = {
    "/livez": health.livez,
    "/readyz": health.readyz,
    "/healthz": health.healthz,
    "/metrics": metrics.metrics_view,
}


class ProbeMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        view = PROBES.get(request.path_info)
        if view is None:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            response = JsonResponse({"error": f"{request.method} is not allowed"}, status=405)
            response["Allow"] = "GET, HEAD"
            return response
        return view(request)
