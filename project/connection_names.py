"""Each process names its database connections after its kind, so that ``pg_stat_activity``
shows who holds how many (``SELECT application_name, count(*) FROM pg_stat_activity GROUP BY
1``; docs/connections.md): ``clusterjobs web`` (settings, for a pooled web process),
``clusterjobs beat``, ``clusterjobs worker NODE`` (a worker's main process) and
``clusterjobs worker NODE pool`` (its pool processes, whose runs and lease renewals they are);
``clusterjobs`` for anything else (``manage.py`` commands, Flower). A name given in
``DATABASE_URL`` (``?application_name=...``) is kept.

A connection takes the name when it opens: each process names its own before its threads open
theirs (the settings' dict is the one every connection of the process reads when it connects),
and closes what it opened before (a beat reads the database's clock when Celery makes its
scheduler, before ``beat_init``); the next statement reconnects under the new name.
"""

from __future__ import annotations

from typing import Any

from celery import signals
from django.db import connections

DEFAULT = "clusterjobs"
_node = ""


def name_connections(name: str, *, close: bool = True) -> None:
    """Connections opened from now on in this process are called ``name`` (PostgreSQL keeps 63
    bytes of it), unless the configuration named them; ``close``: and this thread's open ones
    are closed."""
    for settings in connections.settings.values():
        options = settings.setdefault("OPTIONS", {})
        current = options.get("application_name", DEFAULT)
        if current == DEFAULT or current.startswith(f"{DEFAULT} "):
            options["application_name"] = name
    if close:
        connections.close_all()  # this thread's: reopened under the new name when next used


def _worker_main(sender: Any = None, **_kwargs: Any) -> None:
    global _node
    _node = str(getattr(sender, "hostname", "") or "")
    name_connections(f"{DEFAULT} worker {_node}".strip())


def _worker_pool_process(**_kwargs: Any) -> None:
    # Nothing closed here: a connection the fork inherited shares its socket with the parent
    # (Celery's Django fixup drops those without a word to the server).
    name_connections(f"{DEFAULT} worker {_node} pool".replace("  ", " "), close=False)


def _beat(**_kwargs: Any) -> None:
    name_connections(f"{DEFAULT} beat")


def connect() -> None:
    signals.worker_init.connect(_worker_main, weak=False, dispatch_uid="project.names.worker")
    signals.worker_process_init.connect(
        _worker_pool_process, weak=False, dispatch_uid="project.names.pool"
    )
    signals.beat_init.connect(_beat, weak=False, dispatch_uid="project.names.beat")
