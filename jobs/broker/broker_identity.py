"""Which broker a process talks to, without credentials: beats and nodes record it on their
heartbeat rows, and ``/healthz`` warns when they disagree (a beat publishing where no worker
consumes looks healthy everywhere else)."""

from __future__ import annotations

from urllib.parse import urlsplit

from celery import current_app
from django.conf import settings


def redacted(url: str) -> str:
    """``transport://host:port/vhost`` of a broker URL: no user, no password, no query. For a
    list of failover URLs (``;``-separated), the first one, which every process tries first."""
    first = url.split(";")[0].strip()
    try:
        parts = urlsplit(first)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return ""
    return f"{parts.scheme}://{host}{port}{parts.path or '/'}"[:255]


def current() -> str:
    """This process's broker (its Celery app's, which ``celery -b`` may have set), as
    ``redacted`` writes it ("" when unknown)."""
    try:
        url = current_app.conf.broker_url or getattr(settings, "CELERY_BROKER_URL", "")
    except Exception:
        return ""
    return redacted(url) if isinstance(url, str) else ""
