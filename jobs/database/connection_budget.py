"""What a beat or a worker asks of the database's connections, and what it refuses.

A beat or a worker keeps one connection per thread that talks to the database (docs/connections.md
counts them), opened once and kept, so that its guard (lease renewals, claims, fenced finishes,
heartbeats) never has to win a new connection from a server that others may have filled up.
Django's connection pool (``DATABASES[...]["OPTIONS"]["pool"]``, the web's budget) would undo
that: a run's lease renewals would wait behind the runs for a pooled connection, and a pool
opened in a worker's main process is inherited by the pool processes it forks later (a
replaced child shares its parent's sockets). So a beat or a worker with a pool configured stops
at start with one line naming the setting.
"""

from __future__ import annotations

from django.db import connections

POOL_REFUSED = (
    "configuration error: {process} refuses Django's connection pool (DATABASES[{alias!r}]"
    "['OPTIONS']['pool'], set by DATABASE_POOL_MAX_SIZE): it is for web processes only. A "
    "{process} keeps a connection of its own per thread, so that its guard (ticks, claims, lease "
    "renewals, heartbeats) never waits for one; unset DATABASE_POOL_MAX_SIZE for it "
    "(docs/connections.md)."
)


def pooled_aliases() -> list[str]:
    """The database aliases configured with Django's connection pool."""
    return [
        alias
        for alias, settings in connections.settings.items()
        if (settings.get("OPTIONS") or {}).get("pool")
    ]


def refuse_pool(process: str) -> None:
    """Stop this ``process`` (``"celery worker"``, ``"celery beat"``) if a pool is configured."""
    pooled = pooled_aliases()
    if pooled:
        raise SystemExit(POOL_REFUSED.format(process=process, alias=pooled[0]))
