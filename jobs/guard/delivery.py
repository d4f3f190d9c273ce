"""What one delivery of a run's message did, and how the Celery task reports it, so that Flower
shows each run as it was recorded.

The run record is written first (the fenced finish); only then does the task return or raise:

| run recorded | Celery task state (Flower) | result / exception |
| --- | --- | --- |
| ``succeeded`` | SUCCESS | ``{'status': 'succeeded', 'result': <the job's return value>}`` |
| ``failed`` | FAILURE | ``RunFailed('<type>: <message>')``, the job's traceback as cause |
| ``lost`` | FAILURE | ``RunLost('<why>')`` |
| ``skipped``, ``missed``, ``cancelled`` | SUCCESS | ``{'status': ..., 'reason': ...}`` |
| handed back | SUCCESS | ``{'status': 'scheduled', 'reason': 'handed back: ...'}`` |
| a duplicate | unchanged | Celery's ``Ignore``: no outcome event, the first one stands |

A duplicate shares its task id with the delivery that ran (``jobrun-<id>``): reporting it as a
success would turn a failed run's task green in Flower, so it reports nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from celery.exceptions import Ignore

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
        raise RunFailed(delivery.reason) from delivery.cause
    if delivery.status == RunStatus.LOST:
        raise RunLost(delivery.reason)
    if delivery.status == RunStatus.SUCCEEDED:
        result = None if delivery.result is None else json.loads(delivery.result)
        return {"status": delivery.status, "result": result}
    return {"status": delivery.status, "reason": delivery.reason}
