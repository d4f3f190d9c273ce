"""Pauses that end on their own: a job paused ``--until`` a time is resumed by the first beat
tick at or after it, like an operator's resume (who paused it, why and until when cleared),
audited under ``AUTOMATIC_RESUME`` and logged.

Every beat looks; exactly one resumes each pause: the resume locks the job's row only while it
is still paused with an end that passed, so a beat that waited for the lock finds the row
resumed and leaves it. Slots are as after any resume: none owed for the paused time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import DatabaseError, transaction

from jobs.audit import Actor
from jobs.models import JOB_DISPLAY_RELATED, Job
from jobs.values import timestamps

log = logging.getLogger(__name__)

AUTOMATIC_RESUME = Actor.code("automatic resume")


@dataclass(frozen=True)
class Ended:
    resumed: list[str]  # the jobs this call resumed, by name
    next_end: datetime | None  # the soonest end still to come (a beat wakes up for it)


def resume_ended(now: datetime) -> Ended:
    """Resume every job whose pause ended at ``now`` (the beat's clock, the database's)."""
    ends = Job.objects.filter(enabled=False, paused_until__isnull=False)
    pending = [(pk, until) for pk, until in ends.values_list("pk", "paused_until") if until]
    resumed = [name for pk, until in pending if until <= now and (name := _resume(pk, now))]
    later = [until for _, until in pending if until > now]
    return Ended(resumed, min(later, default=None))


def _resume(job_id: int, now: datetime) -> str | None:
    from jobs.services import set_enabled  # the services import the beat's modules

    try:
        with transaction.atomic():
            locked = Job.objects.select_for_update(of=("self",)).select_related(
                *JOB_DISPLAY_RELATED
            )
            job = locked.filter(pk=job_id, enabled=False, paused_until__lte=now).first()
            if job is None:
                return None  # another beat resumed it, or an operator changed the pause
            until = job.paused_until
            set_enabled(job, True, actor=AUTOMATIC_RESUME)
    except DatabaseError:
        raise
    except Exception:  # one job's row, written around validation, stops nothing else
        log.exception("job %s could not be resumed", job_id, extra={"job_id": job_id})
        return None
    log.info(
        "job %s resumed: its pause ended at %s",
        job.name,
        timestamps.display(until),
        extra={"action": "pause_ended", "job": job.name},
    )
    return job.name
