"""The incidents no single run outcome reveals, found by looking: stuck runs, jobs overdue (the
dead-man's switch) and a cluster with no live beat or no live node.

They open and resolve incidents through the same database functions as the run-outcome trigger
(``jobs/sql/alerts.sql``), so each is one incident however many processes look at once.

Who looks: maintenance (one beat at a time) checks stuck runs and overdue jobs; the cluster
check runs in maintenance *and* in every worker node's alert sender, because "no live beat"
cannot be seen by a beat when every beat is down. A process looks at the cluster only once it
has been up for ``JOBS_BEAT_STALE_AFTER``, so a cluster starting up does not alert about the
processes it has not started yet.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.db.models.functions import Now

from jobs.beat.entries import schedule_of
from jobs.conf import get_ops_conf
from jobs.continuous.nodes import Liveness, with_liveness
from jobs.models import BeatHeartbeat, Blackout, Incident, IncidentKind, Job, JobKind, Node
from jobs.schedule import calendars
from jobs.schedule.kinds import Schedule
from jobs.schedule.slots import latest_slot, period_after, slots_in

log = logging.getLogger(__name__)

# Stuck: past the job's time limit (soft, else hard) by this grace, or, without a limit, past
# STUCK_FACTOR x the p95 of its last STUCK_SAMPLES successful durations (at least
# STUCK_MIN_SAMPLES of them), and never sooner than STUCK_FLOOR.
STUCK_GRACE = 5.0
STUCK_FACTOR = 3.0
STUCK_SAMPLES = 20
STUCK_MIN_SAMPLES = 5
STUCK_FLOOR = 60.0
# Overdue: no successful run within OVERDUE_PERIODS periods plus the start deadline.
OVERDUE_PERIODS = 2


def open_incident(
    job_id: int | None, kind: str, reason: str, summary: str, run_id: int | None = None
) -> int | None:
    """Open the (job, kind) incident or append ``run_id`` to it; its id if this call opened it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT jobs_open_incident(%s, %s, %s, %s, %s)",
            [job_id, kind, reason, summary, run_id],
        )
        row = cursor.fetchone()
    return None if row is None or row[0] is None else int(row[0])


def resolve_incidents(job_id: int | None, kinds: list[str], run_id: int | None = None) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM jobs_resolve_incidents(%s, %s, %s)", [job_id, kinds, run_id])
        return [row[0] for row in cursor.fetchall()]


# A stuck incident only for a run still running when it opens: the run's row is locked first,
# in the incident's transaction, so a finish that comes meanwhile waits for the open (and then
# resolves it), and one under way makes the lock find the run ended. Locked by a statement of
# its own: a function in the select list of a locking SELECT runs before the lock and its
# recheck, so "SELECT jobs_open_incident(...) ... FOR SHARE" opened, for a run whose finish it
# had just waited for, a stuck incident that nothing would ever resolve.
_STILL_RUNNING = """
SELECT 1 FROM jobs_jobrun AS r
 WHERE r.id = %(run)s AND r.status IS NOT DISTINCT FROM 'running'
   FOR SHARE OF r
"""


def _open_while_running(job_id: int, summary: str, run_id: int) -> int | None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_STILL_RUNNING, {"run": run_id})
        if cursor.fetchone() is None:
            return None
        return open_incident(job_id, IncidentKind.STUCK, "stuck", summary, run_id)


def _opened(incident_id: int | None, message: str, **extra: object) -> None:
    if incident_id is not None:
        extra = {"action": "incident_opened", "incident_id": incident_id, **extra}
        log.warning(message, extra=extra)


# --- stuck runs -------------------------------------------------------------------------------

# Runs old enough to be suspects: past their limit + grace, or past the floor.
_RUNNING_LONG = """
SELECT r.id, r.job_id, extract(epoch FROM now() - r.started_at)::float8,
       coalesce(j.soft_time_limit, j.time_limit)
  FROM jobs_jobrun AS r JOIN jobs_job AS j ON j.id = r.job_id
 WHERE r.status = 'running' AND r.trigger <> 'continuous' AND r.started_at IS NOT NULL
   AND r.started_at < now() - make_interval(
         secs => least(coalesce(j.soft_time_limit, j.time_limit) + %(grace)s, %(floor)s))
"""

_TYPICAL = """
SELECT count(*), percentile_cont(0.95) WITHIN GROUP (ORDER BY d)
  FROM (SELECT extract(epoch FROM finished_at - started_at)::float8 AS d FROM jobs_jobrun
         WHERE job_id = %(job_id)s AND status = 'succeeded' AND started_at IS NOT NULL
           AND finished_at IS NOT NULL
         ORDER BY scheduled_for DESC LIMIT %(samples)s) AS recent
"""


def stuck_limit(time_limit: int | None, samples: int, p95: float | None) -> float | None:
    """How long a run may run before it counts as stuck; ``None``: no basis to say."""
    if time_limit is not None:
        return time_limit + STUCK_GRACE
    if samples >= STUCK_MIN_SAMPLES and p95 is not None:
        return max(STUCK_FLOOR, STUCK_FACTOR * p95)
    return None


def check_stuck_runs() -> list[int]:
    """Open a ``stuck`` incident for each run running past its limit; the run ids found."""
    with connection.cursor() as cursor:
        cursor.execute(_RUNNING_LONG, {"grace": STUCK_GRACE, "floor": STUCK_FLOOR})
        suspects = cursor.fetchall()
        typical: dict[int, tuple[int, float | None]] = {}
        for _, job_id, _, limit in suspects:
            if limit is None and job_id not in typical:
                cursor.execute(_TYPICAL, {"job_id": job_id, "samples": STUCK_SAMPLES})
                count, p95 = cursor.fetchone()
                typical[job_id] = (int(count), p95)
    stuck = []
    for run_id, job_id, age, time_limit in suspects:
        samples, p95 = typical.get(job_id, (0, None))
        limit = stuck_limit(time_limit, samples, p95)
        if limit is None or age <= limit:
            continue
        basis = (
            f"its time limit of {time_limit} s"
            if time_limit is not None
            else f"{STUCK_FACTOR:g} x its typical duration (p95 {p95:.1f} s), "
            f"at least {STUCK_FLOOR:g} s"
        )
        summary = f"run {run_id} has been running for {age:.0f} s, past {basis}"
        stuck.append(run_id)
        _opened(
            _open_while_running(job_id, summary, run_id),
            summary,
            job_id=job_id,
            run_id=run_id,
        )
    return stuck


# --- the dead-man's switch --------------------------------------------------------------------


@dataclass(frozen=True)
class Expectation:
    job_id: int
    since: datetime  # a successful run is expected after this instant
    window: timedelta


# Which of the jobs had a successful run for a slot since their instant (one index range scan
# each).
_SUCCEEDED_SINCE = """
SELECT t.job_id FROM unnest(%s::bigint[], %s::timestamptz[]) AS t(job_id, since)
 WHERE EXISTS (SELECT 1 FROM jobs_jobrun AS r
                WHERE r.job_id = t.job_id AND r.scheduled_for >= t.since
                  AND r.status = 'succeeded')
"""


def expected_window(
    schedule: Schedule | None, start_deadline: int, now: datetime
) -> timedelta | None:
    """How long a job may go without a successful run: ``OVERDUE_PERIODS`` periods of its
    schedule plus its start deadline; ``None`` for a one-off or a schedule with no next slot."""
    if schedule is None or schedule.once:
        return None
    slot = latest_slot(schedule, now)
    if slot is None:
        return None
    period = period_after(schedule, slot)
    if period is None:
        return None
    return OVERDUE_PERIODS * period + timedelta(seconds=start_deadline)


def check_overdue_jobs(now: datetime) -> list[int]:
    """Open an ``overdue`` incident for each enabled periodic job with no successful run
    within its expected window (counted from its last edit or resume at the earliest); resolve
    those of jobs paused since. ``now`` is the database clock. The ids of the jobs overdue.

    Not overdue: a job whose silence something else explains. Its ``failing`` or ``stuck``
    incident is open (one incident per job and cause: a bad run joins an ``overdue`` incident
    open before it, ``jobs/sql/alerts.sql``), or none of its slots in the window was one to
    run: each was outside its active period, or skipped by its calendar or a blackout window.
    """
    expectations = []
    jobs: dict[int, tuple[Job, Schedule]] = {}
    candidates = (
        Job.objects.filter(kind=JobKind.PERIODIC, enabled=True)
        .exclude(pk__in=_explained_by_an_open_incident())
        .select_related(
            "periodic_task__interval", "periodic_task__crontab", "periodic_task__clocked"
        )
    )
    for job in candidates.iterator(chunk_size=2000):
        try:
            schedule = schedule_of(job.periodic_task)
            window = expected_window(schedule, job.start_deadline, now)
        except (ValueError, TypeError):
            continue  # a schedule no beat can use: it shows its own error (schedule_errors)
        if window is not None and schedule is not None and job.updated_at < now - window:
            expectations.append(Expectation(job.pk, now - window, window))
            jobs[job.pk] = (job, schedule)
    succeeded: set[int] = set()
    if expectations:
        with connection.cursor() as cursor:
            cursor.execute(
                _SUCCEEDED_SINCE,
                [[e.job_id for e in expectations], [e.since for e in expectations]],
            )
            succeeded = {row[0] for row in cursor.fetchall()}
    silent = [e for e in expectations if e.job_id not in succeeded]
    blackouts = _blackouts([e.job_id for e in silent], min((e.since for e in silent), default=now))
    overdue = [e for e in silent if _expected_to_run(*jobs[e.job_id], e.since, now, blackouts)]
    for e in overdue:
        summary = f"no successful run for {_span(e.window)} (its expected window)"
        _opened(
            open_incident(e.job_id, IncidentKind.OVERDUE, "overdue", summary),
            summary,
            job_id=e.job_id,
        )
    paused = Job.objects.filter(
        enabled=False, incidents__kind=IncidentKind.OVERDUE, incidents__resolved_at__isnull=True
    ).values_list("pk", flat=True)
    for job_id in paused:
        resolve_incidents(job_id, [IncidentKind.OVERDUE])
    return [e.job_id for e in overdue]


def _explained_by_an_open_incident() -> QuerySet[Incident, Any]:
    open_ = Incident.objects.filter(
        kind__in=[IncidentKind.FAILING, IncidentKind.STUCK], resolved_at__isnull=True
    )
    return open_.exclude(job=None).values("job_id")


# The slots of a window looked at one by one to find one the job was to run; a window with more
# (a one-second schedule with a long start deadline) counts as expected to run.
EXPLAINED_SLOTS_LIMIT = 1000


def _blackouts(job_ids: list[int], since: datetime) -> list[Blackout]:
    if not job_ids:
        return []
    return list(
        Blackout.objects.filter(Q(job=None) | Q(job__in=job_ids), ends_at__gt=since).only(
            "job_id", "starts_at", "ends_at"
        )
    )


def _expected_to_run(
    job: Job, schedule: Schedule, since: datetime, now: datetime, blackouts: list[Blackout]
) -> bool:
    """Whether one of ``job``'s slots after ``since`` and past its start deadline by ``now`` was
    one to run: inside its active period, not skipped by its calendar nor a blackout window."""
    until = now - timedelta(seconds=job.start_deadline)
    window = slots_in(schedule, since, until, EXPLAINED_SLOTS_LIMIT)
    if window.omitted:
        return True
    zone = calendars.time_zone_of(schedule)
    for slot in window.slots:
        if any(b.job_id in (None, job.pk) and b.starts_at <= slot < b.ends_at for b in blackouts):
            continue
        decided = calendars.verdict(slot, job, zone=zone)
        if decided.scheduled and not decided.reason:
            return True
    return False


def _span(window: timedelta) -> str:
    seconds = window.total_seconds()
    return f"{seconds:.0f} s" if seconds < 600 else f"{seconds / 3600:.1f} h"


# --- the cluster ------------------------------------------------------------------------------


_STARTED = time.monotonic()


def check_cluster() -> None:
    """Open or resolve the cluster's ``no_beat`` and ``no_node`` incidents (not in a process
    younger than ``JOBS_BEAT_STALE_AFTER``)."""
    stale = get_ops_conf().beat_stale_after
    if time.monotonic() - _STARTED < stale:
        return
    # Reads only, unless something changed: every worker runs this every few seconds.
    open_kinds = set(
        Incident.objects.filter(job=None, resolved_at__isnull=True).values_list("kind", flat=True)
    )
    beats = BeatHeartbeat.objects.filter(last_seen__gt=Now() - timedelta(seconds=stale))
    nodes = with_liveness(Node.objects.all()).filter(liveness=Liveness.ALIVE)
    for kind, live, summary in (
        (
            IncidentKind.NO_BEAT,
            beats.exists(),
            f"no celery beat has reported for {stale:g} s: no slot is being fired",
        ),
        (IncidentKind.NO_NODE, nodes.exists(), "no worker node is alive: no run can start"),
    ):
        if live and kind in open_kinds:
            resolve_incidents(None, [kind])
        elif not live and kind not in open_kinds:
            _opened(open_incident(None, kind, kind.value, summary), summary)


class ClusterWatch:
    """Calls :func:`check_cluster` at most every ``every`` seconds."""

    def __init__(self, every: float) -> None:
        self.every = every
        self._next = 0.0

    def __call__(self) -> None:
        if time.monotonic() < self._next:
            return
        self._next = time.monotonic() + self.every
        check_cluster()
