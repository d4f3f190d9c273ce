from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

# /livez, /readyz, /healthz and /metrics are answered by jobs.web.probes.ProbeMiddleware, ahead of
# host validation and the HTTPS redirect (see docs/operating.md, Probes).
handler400 = "jobs.web.api.bad_request"

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    # The API and the dashboard; ahead of the admin, whose prefix the dashboard shares.
    path("", include("jobs.urls")),
    path("admin/", admin.site.urls),
]
