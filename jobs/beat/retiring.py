"""Jobs that stop on their own, as django-celery-beat stops its rows (``ModelEntry.is_due``): a
job past its ``expires_at`` is paused. Paused like an operator's pause (its row disabled too),
audited and logged, so a job never stops silently.
"""

from __future__ import annotations

import logging

from django.db.models.functions import Now

from jobs import timestamps
from jobs.audit import Actor
from jobs.models import JOB_DISPLAY_RELATED, Job

log = logging.getLogger(__name__)

EXPIRY = Actor.code("expiry")


def pause_expired() -> list[str]:
    """Pause every enabled job whose ``expires_at`` passed (database clock); their names.
    Maintenance calls it: the beats already give such a job no slot."""
    from jobs.services import set_enabled  # the services import the beat's modules

    paused = []
    expired = Job.objects.filter(enabled=True, expires_at__lte=Now())
    for job in expired.select_related(*JOB_DISPLAY_RELATED):
        set_enabled(job, False, actor=EXPIRY)
        log.warning(
            "job %s expired at %s: paused, as django-celery-beat disables an expired entry",
            job.name,
            timestamps.display(job.expires_at),
            extra={"action": "expired", "job": job.name},
        )
        paused.append(job.name)
    return paused
