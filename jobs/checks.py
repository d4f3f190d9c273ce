"""System checks for the jobs app."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register


@register(Tags.compatibility)
def check_database_vendor(**_kwargs: Any) -> list[Error]:
    return database_vendor_problems(settings.DATABASES["default"])


def database_vendor_problems(database: Mapping[str, Any]) -> list[Error]:
    engine = database.get("ENGINE", "")
    if "postgresql" in engine:
        return []
    return [
        Error(
            f"The jobs app needs PostgreSQL for its run records; DATABASES['default'] uses "
            f"{engine!r}.",
            hint="Set DATABASES['default']['ENGINE'] to 'django.db.backends.postgresql' (this "
            "repository's own project: point DATABASE_URL at PostgreSQL, or let `make run` "
            "start an embedded one).",
            id="jobs.E001",
        )
    ]


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


# Celery's own default when no broker is configured anywhere: a Django project whose Celery app
# is never made (or never reads the settings) publishes here, and nothing answers.
CELERY_DEFAULT_BROKER = "amqp://guest@localhost//"


@register(Tags.compatibility)
def check_broker(**_kwargs: Any) -> list[Error]:
    """Runs are published through the project's Celery app: a broker must be configured and its
    client library installed, or every run waits for a message that never leaves."""
    from celery import current_app

    url = current_app.conf.broker_url
    if not url:
        return [
            Error(
                "No Celery broker is configured: runs and enqueued tasks would be published to "
                f"Celery's default {CELERY_DEFAULT_BROKER}.",
                hint="Make the project's Celery app and load it with Django "
                "(proj/celery.py with app.config_from_object('django.conf:settings', "
                "namespace='CELERY'), imported by proj/__init__.py), and set "
                "CELERY_BROKER_URL, e.g. redis://localhost:6379/0.",
                id="jobs.E002",
            )
        ]
    missing = missing_broker_client(url)
    if missing is not None:
        return [
            Error(
                f"The client library of the Celery broker is not installed: {missing}.",
                hint="Install it with Celery's extra for the broker, e.g. pip install "
                "'celery[redis]' for redis:// or sentinel://.",
                id="jobs.E003",
            )
        ]
    return sentinel_problems(url, current_app.conf.broker_transport_options)


def sentinel_problems(url: str, transport_options: Any) -> list[Error]:
    """A ``sentinel://`` broker needs the name of the master its sentinels monitor: without it
    kombu refuses every connection, so no beat publishes and no worker consumes."""
    if url.split("://", 1)[0].lower() != "sentinel":
        return []
    options = transport_options if isinstance(transport_options, Mapping) else {}
    if options.get("master_name"):
        return []
    return [
        Error(
            "The Celery broker is Redis Sentinel (sentinel://) but no master name is set: every "
            "connection to it fails.",
            hint="Set JOBS_BROKER_SENTINEL_MASTER to the name in the sentinels' `sentinel "
            "monitor <name> ...` line (this repository's project), or "
            'CELERY_BROKER_TRANSPORT_OPTIONS["master_name"].',
            id="jobs.E004",
        )
    ]


# The Python package each broker scheme's kombu transport needs (kombu's extras), by URL scheme.
BROKER_CLIENTS = {
    "redis": "redis",
    "rediss": "redis",
    "sentinel": "redis",
    "amqp": "amqp",
    "amqps": "amqp",
    "pyamqp": "amqp",
    "sqs": "boto3",
    "mongodb": "pymongo",
    "zookeeper": "kazoo",
    "confluentkafka": "confluent_kafka",
}


def missing_broker_client(url: str) -> str | None:
    """What is missing to talk to the broker at ``url`` (``None``: nothing): its client package,
    or what kombu says when it makes the transport (made, not connected: no network traffic)."""
    from kombu import Connection

    scheme = url.split("://", 1)[0].split("+", 1)[0].lower()
    package = BROKER_CLIENTS.get(scheme)
    if package is not None and importlib.util.find_spec(package) is None:
        return f"the Python package {package!r} ({scheme}://) is not installed"
    connection = None
    try:
        connection = Connection(url)
        connection.transport  # noqa: B018  (made here: a missing client raises)
    except KeyError as exc:
        return f"kombu has no transport for {scheme}:// ({exc})"
    except Exception as exc:  # what a transport raises without its client: ImportError, ...
        return f"{type(exc).__name__}: {exc}"
    finally:
        if connection is not None:
            connection.release()
    return None
