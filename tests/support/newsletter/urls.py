"""The newsletter's URLs beside the project's."""

from __future__ import annotations

from django.urls import path

from project.urls import urlpatterns as project_urlpatterns
from tests.support.newsletter import views

urlpatterns = [
    path("newsletter/count", views.count),
    path("newsletter/counted/<str:result_id>", views.counted),
    *project_urlpatterns,
]
