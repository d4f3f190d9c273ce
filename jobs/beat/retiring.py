"""Jobs that stop on their own, as django-celery-beat stops its rows (``ModelEntry.is_due``): a
``one_off`` job once its first slot is recorded, a job past its ``expires_at``. Each is paused
like an operator's pause (its row disabled too), audited and logged, so a job never stops
silently.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.db.models.functions import Now

from jobs.audit import Actor
from jobs.beat import slot_records
from jobs.guard import run_records
from jobs.models import JOB_DISPLAY_RELATED, Job
from jobs.values import timestamps

log = logging.getLogger(__name__)

ONE_OFF = Actor.code("one_off")
EXPIRY = Actor.code("expiry")


def record_one_off_slot(job_id: int, slot: datetime, reason: str) -> list[run_records.NewRun]:
    """Record ``slot`` of a one_off job, calendar ``reason`` and all (``insert_scheduled``), and
    pause the job in the same transaction, under its row's lock: however many beats fire it,
    or fire a later slot before they hear of the pause, only the first slot recorded runs. The
    run made, if this call made it (none when the job was already paused)."""
    from jobs.services import set_enabled  # the services import the beat's modules

    with transaction.atomic():
        locked = Job.objects.select_for_update(of=("self",)).select_related(*JOB_DISPLAY_RELATED)
        job = locked.filter(pk=job_id, enabled=True).first()
        if job is None:
            return []
        made = slot_records.insert_scheduled([(job_id, slot)], reasons=[reason])
        set_enabled(job, False, actor=ONE_OFF)
    log.info(
        "one_off job %s had its slot %s: paused, as django-celery-beat disables a one_off entry "
        "once it ran",
        job.name,
        timestamps.display(slot),
        extra={"action": "one_off_done", "job": job.name},
    )
    return made


def pause_expired() -> list[str]:
    """Pause every enabled job whose ``expires_at`` passed (database clock); their names.
    Maintenance calls it: the beats already give such a job no slot."""
    from jobs.services import set_enabled  # the services import the beat's modules

    paused = []
    expired = Job.objects.filter(enabled=True, expires_at__lte=Now())
    for job in expired.select_related(*JOB_DISPLAY_RELATED):
        try:
            set_enabled(job, False, actor=EXPIRY)
        except Exception:  # one job's row, written around validation, stops nothing else
            log.exception(
                "job %s expired but could not be paused", job.name, extra={"job": job.name}
            )
            continue
        log.warning(
            "job %s expired at %s: paused, as django-celery-beat disables an expired entry",
            job.name,
            timestamps.display(job.expires_at),
            extra={"action": "expired", "job": job.name},
        )
        paused.append(job.name)
    return paused
