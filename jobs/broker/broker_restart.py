"""A worker survives its Redis broker going away while it holds unacknowledged messages.

Found by the nemesis (docs/nemesis.md, "What it found"); kombu 5.7, Celery 5.7, redis-py 8.1.
When a worker's broker connection fails, Celery's ``on_connection_error_after_connected`` first
``collect()``\\ s the connection, then ``close()``\\ s it. kombu's Redis ``Channel.close`` begins by
reading the reply of the ``BRPOP`` it may have in flight (``_brpop_read``, added by
celery/kombu#1733 so that a message popped at that moment is not lost), and lets only ``Empty``
through: with the server gone that read raises ``ConnectionError``, and the close stops there,
before the channel is marked closed, its pools released or its unacknowledged messages restored.
``collect()`` ignores that error and then releases the transport (``transport.client = None``).
The second ``close()`` closes the channel for real (the failed read cleared ``_in_poll``) and
restores the unacknowledged messages through a client that ``_connparams`` builds from
``self.connection.client``, now ``None``: ``AttributeError: 'NoneType' object has no attribute
'hostname'``. Not a connection error, so Celery's ``ignore_errors`` lets it through and the
worker stops with ``Unrecoverable error`` — every worker at once, when they share the broker.
The ``BRPOP`` is in flight whenever the worker has prefetch credit left, so a worker executing
runs (``acks_late``) but not full is exposed; the failure shows when the broker's loss is seen
first on another of its connections (the remote-control pub/sub one).

The defence, installed in the worker's main process (``worker_init``): the same read of the
``BRPOP`` in flight, before kombu's own close, also letting a connection error through (the
connection is gone, no reply can come). kombu's close then finishes while the transport is still
attached: the channel is closed and its unacknowledged messages restored, or, when the broker
does not answer, the restore fails with a connection error, which Celery ignores as it does for
a worker whose ``BRPOP`` was not in flight. The runs being executed go on in the pool and are
recorded in the database; a message whose restore failed stays in the broker's unacknowledged
set if the broker kept it (redelivered after the visibility timeout: a duplicate delivery, a
no-op at the claim) and otherwise lived only in the worker, which executes it.

Guarded: nothing is changed unless kombu's Redis ``Channel`` still has the ``close``,
``_brpop_read`` and ``_in_poll`` this relies on; installing twice wraps once.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

_WRAPPED = "_jobs_survives_a_lost_broker"


def install(**_signal_kwargs: Any) -> bool:
    """Wrap kombu's Redis ``Channel.close`` (see the module's notes); ``True`` when it is (now
    or already) wrapped, ``False`` when kombu does not look as expected and is left alone."""
    try:
        from kombu.transport import redis as kombu_redis
    except ImportError:  # pragma: no cover - kombu always ships the module
        return False
    channel = getattr(kombu_redis, "Channel", None)
    close = getattr(channel, "close", None)
    empty = getattr(kombu_redis, "Empty", None)
    if channel is None or not callable(close) or empty is None:
        return False
    if getattr(close, _WRAPPED, False):
        return True
    if not callable(getattr(channel, "_brpop_read", None)) or not hasattr(channel, "_in_poll"):
        log.warning(
            "kombu's Redis channel changed (no _brpop_read/_in_poll): the defence against a "
            "worker exiting on a broker restart (jobs.broker.broker_restart) is not installed"
        )
        return False
    channel.close = _wrap(close, empty)
    return True


def _wrap(close: Callable[[Any], Any], empty: type[BaseException]) -> Callable[[Any], Any]:
    @functools.wraps(close)
    def close_even_when_the_broker_is_gone(self: Any) -> Any:
        if self._in_poll:
            try:
                self._brpop_read()  # delivers a message popped meanwhile, as kombu's close does
            except empty:
                pass
            except tuple(getattr(self, "connection_errors", ())) as exc:
                # The connection is gone: no reply will come. _brpop_read disconnected it and
                # cleared _in_poll; kombu's close below now runs to its end.
                log.debug("closing a Redis channel whose BRPOP connection is gone: %r", exc)
        return close(self)

    setattr(close_even_when_the_broker_is_gone, _WRAPPED, True)
    return close_even_when_the_broker_is_gone
