"""What keeps the suite's processes apart when ``make test`` runs it side by side (pytest-xdist;
``devtools/side_by_side.py`` loads this plugin with ``-p``).

Each process already has a database of its own (pytest-django names it ``test_…_gw0``, …), a
queue per test and free ports. What they would still share is the Redis database of the broker:
a test that loses the broker's contents (FLUSHDB), Flower's view of the workers (their names are
the same in every test) and the workers' control messages. So each process gets a Redis database
of its own, by rewriting ``CELERY_BROKER_URL`` before pytest-django loads the settings, which is
why this is a plugin (imported while pytest reads its arguments) and not a conftest.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

REDIS_DATABASES = 16  # redis-server's default ``databases``


def broker_url_of_worker(url: str, worker: str) -> str:
    """``url`` for xdist worker ``worker`` (``gw0``, ``gw1``, …): a Redis URL moves to a
    database of the worker's own, counted on from the suite's; any other broker stays shared
    (tests keep apart on it by their queues and, on RabbitMQ, their virtual hosts)."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        return url
    suite_db = int(parts.path.strip("/") or 0)
    index = int(worker.removeprefix("gw"))
    if index + 1 >= REDIS_DATABASES:
        raise ValueError(f"xdist worker {worker}: Redis has no database left for it")
    own_db = (suite_db + 1 + index) % REDIS_DATABASES
    return urlunsplit(parts._replace(path=f"/{own_db}"))


def _give_this_worker_its_own_broker_database() -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    url = os.environ.get("CELERY_BROKER_URL")
    if worker and url:
        os.environ["CELERY_BROKER_URL"] = broker_url_of_worker(url, worker)


_give_this_worker_its_own_broker_database()
