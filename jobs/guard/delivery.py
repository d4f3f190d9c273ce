"""What one delivery of a run's message did, and how the Celery task reports it, so that Flower
shows each run as it was recorded.

More in docs/architecture.md, "Module notes".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from celery.exceptions import Ignore

from jobs import observers
from jobs.exceptions import RunFailed, RunLost
from jobs.models import RunStatus


@dataclass(frozen=True)
class Delivery:
    """What a worker did with one message of run ``run_id``; ``status`` is what the run is
    recorded as now (for a duplicate, what it was found as)."""

    run_id: int
    status: str
    reason: str = ""
    # The job's return value as recorded (JSON), for a run that succeeded.
    result: str | None = None
    # The exception the job function raised, for a run recorded failed because of it.
    cause: BaseException | None = None
    duplicate: bool = False


def report(delivery: Delivery) -> dict[str, Any]:
    """The Celery task's return value for ``delivery``, or the exception it raises."""
    if delivery.duplicate:
        raise Ignore(f"duplicate delivery of run {delivery.run_id} ({delivery.status})")
    if delivery.status == RunStatus.FAILED:
        if delivery.cause is not None:
            observers.run_failed(delivery.cause)
        raise RunFailed(delivery.reason) from delivery.cause
    if delivery.status == RunStatus.LOST:
        raise RunLost(delivery.reason)
    if delivery.status == RunStatus.SUCCEEDED:
        result = None if delivery.result is None else json.loads(delivery.result)
        return {"status": delivery.status, "result": result}
    return {"status": delivery.status, "reason": delivery.reason}
