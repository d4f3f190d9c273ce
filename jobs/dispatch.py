"""Publishing run messages: the broker is only a doorbell, the run row is the truth."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from celery import current_app
from django.db import transaction
from django.utils import timezone

from jobs.models import Job, JobRun, Trigger

log = logging.getLogger(__name__)


def task_id_for(run_id: int) -> str:
    """Deterministic, so a republished message shows as the same task in Flower."""
    return f"jobrun-{run_id}"


def publish(job: Job, run_id: int, scheduled_for: datetime, producer: object = None) -> None:
    """Send the message that asks a worker to execute run ``run_id`` of ``job``."""
    options: dict[str, Any] = {"queue": job.queue, "task_id": task_id_for(run_id)}
    if job.priority is not None:
        options["priority"] = job.priority
    if job.soft_time_limit is not None:
        options["soft_time_limit"] = job.soft_time_limit
    if job.time_limit is not None:
        options["time_limit"] = job.time_limit
    if producer is not None:
        options["producer"] = producer
    current_app.send_task(
        job.task,
        kwargs={"run_id": run_id, "job": job.name, "slot": scheduled_for.isoformat()},
        **options,
    )


def publish_many(runs: Iterable[tuple[Job, int, datetime]], producer: object = None) -> int:
    """Publish each run; one failed publish is logged and left for maintenance to re-publish."""
    sent = 0
    for job, run_id, scheduled_for in runs:
        try:
            publish(job, run_id, scheduled_for, producer=producer)
        except Exception:
            log.exception(
                "publish failed; the run stays scheduled for maintenance to re-publish",
                extra={"action": "publish_failed", "run_id": run_id, "job": job.name},
            )
        else:
            sent += 1
    return sent


def trigger_now(job: Job, trigger: Trigger = Trigger.MANUAL) -> JobRun:
    """Create a run of ``job`` for now, outside its schedule, and publish it after commit."""
    with transaction.atomic():
        run = JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=trigger)
        # A broker outage must not turn "run now" into an error after the run was recorded:
        # the run stays scheduled and maintenance re-publishes it.
        transaction.on_commit(lambda: publish_many([(job, run.pk, run.scheduled_for)]), robust=True)
    run.refresh_from_db()
    return run
