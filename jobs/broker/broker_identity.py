"""Which broker a process talks to, without credentials: beats and nodes record it on their
heartbeat rows, and ``/healthz`` warns when they disagree (a beat publishing where no worker
consumes looks healthy everywhere else)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlsplit

from celery import current_app
from django.conf import settings

_COLUMN = 255


def redacted(url: str, master_name: str | None = None) -> str:
    """``transport://host:port/vhost`` of a broker URL: no user, no password, no query. For a
    list of failover URLs (``;``-separated), the first one, which every process tries first.

    A Redis Sentinel URL (``sentinel://s1:26379;sentinel://s2:26379``) names no broker by
    itself: every sentinel of the list is asked which node is the master of ``master_name``
    (the transport option). Its identity is every sentinel, sorted (the order does not change
    the broker), the database, and the master name: ``sentinel://s1:26379,s2:26379/0?master_name=m``."""
    urls = [part.strip() for part in url.split(";") if part.strip()]
    if not urls:
        return ""
    try:
        first = urlsplit(urls[0])
        if first.scheme.lower() == "sentinel":
            hosts = sorted({_host_port(urlsplit(part)) for part in urls})
            master = f"?master_name={quote(master_name or '', safe='')}"
            return f"sentinel://{','.join(hosts)}{first.path or '/'}{master}"[:_COLUMN]
        return f"{first.scheme}://{_host_port(first)}{first.path or '/'}"[:_COLUMN]
    except ValueError:
        return ""


def _host_port(parts: Any) -> str:
    host = parts.hostname or ""
    return f"{host}:{parts.port}" if parts.port else host


def current() -> str:
    """This process's broker (its Celery app's, which ``celery -b`` may have set), as
    ``redacted`` writes it ("" when unknown)."""
    try:
        conf = current_app.conf
        url = conf.broker_url or getattr(settings, "CELERY_BROKER_URL", "")
        options = getattr(conf, "broker_transport_options", None) or {}
    except Exception:
        return ""
    if not isinstance(url, str):
        return ""
    master = options.get("master_name") if isinstance(options, dict) else None
    return redacted(url, master if isinstance(master, str) else None)
