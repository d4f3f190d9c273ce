"""``ClusterScheduler``: the beat scheduler that may run on every server at once.

Each beat computes the same deterministic slots (``jobs.slots``) for every enabled periodic job,
inserts one run per due slot in a single statement, and publishes only the runs its insert
created. Beats never coordinate with each other: the unique ``(job, scheduled_for)`` index does.
All due slots of a tick go out in one pass. Edits are noticed through django-celery-beat's change
marker, checked every tick (at most ``JOBS_BEAT_MAX_INTERVAL`` apart).
"""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery.beat import Scheduler
from django.db import DatabaseError, close_old_connections, connection
from django.utils import timezone
from django_celery_beat.models import PeriodicTasks

from jobs import beat_link, records, slots
from jobs.conf import get_conf
from jobs.dispatch import publish_many
from jobs.models import Job, JobKind
from jobs.schedules import Schedule

log = logging.getLogger(__name__)

# After a database error, how long beat waits before its next try.
ERROR_BACKOFF_SECONDS = 1.0


@dataclass
class _Entry:
    job: Job
    schedule: Schedule
    due: datetime  # the next slot this beat will fire


class ClusterScheduler(Scheduler):
    """A celery beat scheduler for ``Job`` rows; safe to run on several servers at once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._entries: dict[int, _Entry] = {}
        self._heap: list[tuple[datetime, int]] = []
        self._seen_change: datetime | None = None
        self._loaded = False
        super().__init__(*args, **kwargs)
        self._max_sleep = get_conf().beat_max_interval

    # --- celery.beat.Scheduler interface --------------------------------------------------
    def setup_schedule(self) -> None:
        from jobs.sync import sync_declared_jobs

        try:
            sync_declared_jobs()
            self._reload(timezone.now())
        except DatabaseError:
            log.exception("beat could not load jobs; will retry", extra={"action": "beat_load"})
            close_old_connections()

    def tick(self, *args: Any, **kwargs: Any) -> float:
        try:
            return self._tick(timezone.now())
        except DatabaseError:
            log.exception("beat tick failed; will retry", extra={"action": "beat_tick_error"})
            connection.close()
            return ERROR_BACKOFF_SECONDS

    def sync(self) -> None:
        """Nothing to persist: slots are derived from the schedule, not from beat state."""

    @property
    def info(self) -> str:
        return "    . cluster scheduler: one run per slot across every beat (jobs.beat)"

    # --- the loop ---------------------------------------------------------------------------
    def _tick(self, now: datetime) -> float:
        change = PeriodicTasks.last_change()
        if not self._loaded or change != self._seen_change:
            self._seen_change = change
            self._reload(now)
        fired: list[tuple[Job, datetime]] = []
        while self._heap and self._heap[0][0] <= now:
            when, job_id = heapq.heappop(self._heap)
            entry = self._entries.get(job_id)
            if entry is None or entry.due != when:
                continue  # superseded by a reload
            slot = when
            if now - when > timedelta(seconds=entry.job.start_deadline):
                # This beat stalled past the deadline: fire only the newest slot. Recording the
                # skipped ones as missed is the catch-up policy's job (see README, caveats).
                slot = slots.latest_slot(entry.schedule, now) or when
            fired.append((entry.job, slot))
            following = slots.next_slot(entry.schedule, slot)
            if following is not None:
                entry.due = following
                heapq.heappush(self._heap, (following, job_id))
        if fired:
            self._fire(fired)
        if not self._heap:
            return self._max_sleep
        until_next = (self._heap[0][0] - timezone.now()).total_seconds()
        return max(0.0, min(until_next, self._max_sleep))

    def _fire(self, fired: list[tuple[Job, datetime]]) -> None:
        created = records.insert_scheduled([(job.pk, slot) for job, slot in fired])
        jobs_by_id = {job.pk: job for job, _ in fired}
        sent = publish_many(
            ((jobs_by_id[run.job_id], run.run_id, run.scheduled_for) for run in created),
            producer=self.producer,
        )
        log.info(
            "beat fired %d slot(s): %d created here, %d published",
            len(fired),
            len(created),
            sent,
            extra={"action": "beat_fired"},
        )

    def _reload(self, now: datetime) -> None:
        jobs = Job.objects.filter(
            kind=JobKind.PERIODIC, enabled=True, periodic_task__isnull=False
        ).select_related(
            "periodic_task__interval", "periodic_task__crontab", "periodic_task__clocked"
        )
        self._entries = {}
        self._heap = []
        for job in jobs:
            try:
                schedule = beat_link.schedule_of(job.periodic_task)
            except ValueError:
                log.exception("job has a malformed schedule; skipping it", extra={"job": job.name})
                continue
            assert schedule is not None
            due = _first_due(schedule, job, now)
            if due is None:
                continue
            self._entries[job.pk] = _Entry(job=job, schedule=schedule, due=due)
            self._heap.append((due, job.pk))
        heapq.heapify(self._heap)
        self._loaded = True
        log.info("beat loaded %d job(s)", len(self._entries), extra={"action": "beat_loaded"})


def _first_due(schedule: Schedule, job: Job, now: datetime) -> datetime | None:
    """The latest slot if it is still within the job's start deadline (another beat may
    already have fired it: the insert is then a no-op), else the next one."""
    latest = slots.latest_slot(schedule, now)
    if latest is not None and now - latest <= timedelta(seconds=job.start_deadline):
        return latest
    return slots.next_slot(schedule, now)
