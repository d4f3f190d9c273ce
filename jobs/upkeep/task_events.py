"""Celery task events sent on behalf of a worker that can no longer send them.

Flower (like every Celery monitor) learns a task's fate from the events its worker sends. A
worker that died mid-run sends none, so its run's task would stay STARTED in Flower forever,
after maintenance recorded the run ``lost``. Maintenance therefore sends the ``task-failed`` the
worker could not, under the worker's own node name so that Flower files it with that worker,
and with the exception the worker would have raised (``RunLost``, see ``jobs.guard.delivery``).

Best effort: nothing is sent when workers send no task events (no monitor listens), and a
failure to send is logged, never raised: the run record is the truth, the event only news.
Flower counts any event from a node as a sign of life, so it shows the dead worker online
for one heartbeat window (two of its heartbeat periods) after such an event.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence

from celery import current_app

from jobs.broker.messages import task_id_for
from jobs.exceptions import RunLost
from jobs.guard.run_records import LostRun

log = logging.getLogger(__name__)


def announce_lost(runs: Sequence[LostRun]) -> None:
    """Send a ``task-failed`` event for each run, from the node that was running it."""
    if not runs or not current_app.conf.worker_send_task_events:
        return
    by_node: dict[str, list[LostRun]] = defaultdict(list)
    for run in runs:
        by_node[run.node].append(run)
    try:
        for node, lost in by_node.items():
            # An event's hostname is its dispatcher's: one dispatcher per dead node.
            with current_app.events.default_dispatcher(hostname=node or None) as dispatcher:
                for run in lost:
                    dispatcher.send(
                        "task-failed",
                        uuid=task_id_for(run.run_id),
                        exception=repr(RunLost(run.error)),
                        traceback="",
                    )
    except Exception:
        log.exception(
            "could not tell Flower about lost runs; they may show as started there",
            extra={"action": "lost_event_failed", "run_ids": [run.run_id for run in runs][:100]},
        )
