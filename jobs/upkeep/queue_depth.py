"""How many messages wait in a broker queue, so maintenance re-publishes only the runs whose
messages the queue cannot still be holding (a busy or stopped cluster's queue is not a lost one)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)


def waiting_messages(connection: Any, queues: Iterable[str]) -> dict[str, int | None]:
    """Each queue's message count as the broker reports it (a passive declare, on Redis the sum
    over its priority lists); 0 for a queue that does not exist, ``None`` when the broker
    cannot say (the caller then trusts nothing is queued)."""
    counts: dict[str, int | None] = {}
    for queue in queues:
        channel = connection.channel()
        try:
            counts[queue] = int(channel.queue_declare(queue=queue, passive=True)[1])
        except Exception as exc:
            # RabbitMQ and kombu's Redis both answer a missing queue with a 404.
            missing = "404" in str(getattr(exc, "reply_code", "")) or "NOT_FOUND" in str(exc)
            counts[queue] = 0 if missing else None
            if not missing:
                log.warning(
                    "could not read the depth of queue %s: %s",
                    queue,
                    exc,
                    extra={"action": "queue_depth_failed", "queue": queue},
                )
        finally:
            # A channel the broker closed (AMQP's 404) is closed already.
            with contextlib.suppress(Exception):
                channel.close()
    return counts
