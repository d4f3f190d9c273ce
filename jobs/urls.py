"""The app's pages, for a project's URLconf: ``path("", include("jobs.urls"))`` ahead of
``path("admin/", admin.site.urls)`` (the dashboard lives under the admin's prefix). The probes
and /metrics need no URL: ``jobs.web.probes.ProbeMiddleware`` answers them."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path, re_path

from jobs.web import api, dashboard

urlpatterns = [
    path(
        "admin/jobs/dashboard/",
        admin.site.admin_view(dashboard.dashboard_view),
        name="jobs_dashboard",
    ),
    path("api/openapi.json", api.openapi, name="api_openapi"),
    path("api/jobs", api.jobs_collection, name="api_jobs"),
    # A colon, not a slash: /api/jobs/pause would be the job named "pause".
    path("api/jobs:pause", api.jobs_pause, name="api_jobs_pause"),
    path("api/jobs:resume", api.jobs_resume, name="api_jobs_resume"),
    path("api/jobs/<str:name>", api.job_detail, name="api_job"),
    path("api/jobs/<str:name>/pause", api.job_pause, name="api_job_pause"),
    path("api/jobs/<str:name>/resume", api.job_resume, name="api_job_resume"),
    path("api/jobs/<str:name>/runs", api.job_runs, name="api_job_runs"),
    path("api/jobs/<str:name>/upcoming", api.job_upcoming, name="api_job_upcoming"),
    path("api/jobs/<str:name>/backfill", api.job_backfill, name="api_job_backfill"),
    path("api/runs", api.runs_collection, name="api_runs"),
    path("api/runs/<str:run_id>", api.run_detail, name="api_run"),
    path("api/runs/<str:run_id>/log", api.run_log, name="api_run_log"),
    path("api/audit", api.audit_collection, name="api_audit"),
    path("api/blackouts", api.blackouts_collection, name="api_blackouts"),
    path("api/blackouts/<str:name>", api.blackout_detail, name="api_blackout"),
    re_path(r"^api/", api.not_found),
]
