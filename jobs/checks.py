"""System checks for the jobs app."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, register


@register(Tags.compatibility)
def check_database_vendor(**_kwargs: Any) -> list[Error]:
    engine = settings.DATABASES["default"]["ENGINE"]
    if "postgresql" not in engine:
        return [
            Error(
                "The jobs app needs PostgreSQL for run records (DATABASE_URL).",
                hint="Point DATABASE_URL at PostgreSQL; `make run` starts an embedded one.",
                id="jobs.E001",
            )
        ]
    return []
