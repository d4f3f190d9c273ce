"""System checks for the jobs app."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register


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


OUR_SCHEDULERS = ("jobs.beat.scheduler:ClusterScheduler", "jobs.beat.scheduler.ClusterScheduler")


@register(Tags.compatibility)
def check_beat_scheduler(**_kwargs: Any) -> list[Warning]:
    """A beat on another scheduler (django-celery-beat's DatabaseScheduler, Celery's own) beside
    ours fires every job a second time and none of our guarantees holds for it."""
    # Celery's default when unset is its own PersistentScheduler.
    scheduler = getattr(settings, "CELERY_BEAT_SCHEDULER", "celery.beat:PersistentScheduler")
    name = scheduler if isinstance(scheduler, str) else getattr(scheduler, "__qualname__", "")
    if isinstance(scheduler, type) and scheduler.__module__ == "jobs.beat.scheduler":
        return []
    if name in OUR_SCHEDULERS:
        return []
    return [
        Warning(
            f"CELERY_BEAT_SCHEDULER is {scheduler!r}, not the jobs app's scheduler: a beat "
            "started with it fires the schedules itself, beside the cluster's beats.",
            hint='Set CELERY_BEAT_SCHEDULER = "jobs.beat.scheduler:ClusterScheduler" (and start '
            "no beat with -S django).",
            id="jobs.W001",
        )
    ]


@register(Tags.database)
def check_pooler_options(**_kwargs: Any) -> list[Warning]:
    """``DATABASE_POOLER=transaction`` sets both options; one without the other is half a fix."""
    return pooler_options_problems(settings.DATABASES.get("default", {}))


def pooler_options_problems(database: Mapping[str, Any]) -> list[Warning]:
    options = database.get("OPTIONS", {})
    unprepared = "prepare_threshold" in options and options["prepare_threshold"] is None
    no_server_cursors = bool(database.get("DISABLE_SERVER_SIDE_CURSORS"))
    if unprepared == no_server_cursors:
        return []
    return [
        Warning(
            "Only one of the transaction-pooler options is set: OPTIONS['prepare_threshold'] = "
            "None and DISABLE_SERVER_SIDE_CURSORS = True go together behind PgBouncer in "
            "transaction mode.",
            hint="Set DATABASE_POOLER=transaction (project/settings.py), or set both in DATABASES.",
            id="jobs.W002",
        )
    ]


@register(Tags.compatibility)
def check_public_url(**_kwargs: Any) -> list[Warning]:
    """Alerts link the admin's pages by ``JOBS_PUBLIC_URL``: without it they carry no link,
    as a relative one opens nowhere from a chat message or an e-mail."""
    from jobs.conf import get_alerts_conf

    conf = get_alerts_conf()
    if conf.public_url or not conf.channels:
        return []
    return [
        Warning(
            "JOBS_PUBLIC_URL is unset: alerts are sent without links to their incident, job "
            "and runs.",
            hint="Set JOBS_PUBLIC_URL to this deployment's address as operators reach it, e.g. "
            "https://jobs.example.com.",
            id="jobs.W003",
        )
    ]
