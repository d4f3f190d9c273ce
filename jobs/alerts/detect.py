"""The incidents no single run outcome reveals, found by looking: runs running long or too
short (against their job's duration baseline, :mod:`jobs.alerts.baseline`), jobs overdue (the
dead-man's switch) and a cluster with no live beat or no live node.

They open and resolve incidents through the same database functions as the run-outcome trigger
(``jobs/sql/alerts.sql``), so each is one incident however many processes look at once.

Who looks: maintenance (one beat at a time) checks durations and overdue jobs; the cluster
check runs in maintenance *and* in every worker node's alert sender, because "no live beat"
cannot be seen by a beat when every beat is down. A process looks at the cluster only once it
has been up for ``JOBS_BEAT_STALE_AFTER``, so a cluster starting up does not alert about the
processes it has not started yet.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.db.models.functions import Now

from jobs.alerts import baseline
from jobs.alerts.baseline import Baseline, DurationRules, long_run_limit, too_short
from jobs.beat.entries import schedule_of
from jobs.conf import get_ops_conf
from jobs.continuous.nodes import Liveness, with_liveness
from jobs.models import (
    AlertReason,
    BeatHeartbeat,
    Blackout,
    Incident,
    IncidentKind,
    Job,
    JobKind,
    Node,
)
from jobs.schedule import calendars
from jobs.schedule.kinds import Schedule
from jobs.schedule.slots import latest_slot, period_after, slots_in

log = logging.getLogger(__name__)

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


# A running-long incident only for a run still running when it opens: the run's row is locked
# first, in the incident's transaction, so a finish that comes meanwhile waits for the open (and
# then resolves it), and one under way makes the lock find the run ended. Locked by a statement
# of its own: a function in the select list of a locking SELECT runs before the lock and its
# recheck, so "SELECT jobs_open_incident(...) ... FOR SHARE" opened, for a run whose finish it
# had just waited for, an incident that nothing would ever resolve.
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
        return open_incident(
            job_id, IncidentKind.RUNNING_LONG, AlertReason.RUNNING_LONG, summary, run_id
        )


def _opened(incident_id: int | None, message: str, **extra: object) -> None:
    if incident_id is not None:
        extra = {"action": "incident_opened", "incident_id": incident_id, **extra}
        log.warning(message, extra=extra)


# --- durations: running long, too short (the rules: jobs.alerts.baseline) ---------------------

# A job's duration settings, as DurationRules takes them, after its table's alias "j".
_RULES = """coalesce(j.soft_time_limit, j.time_limit), j.max_duration, j.long_run_factor,
       j.min_duration, j.baseline_alerts"""

# Runs old enough to be suspects: past the shortest limit any rule could give them.
_RUNNING_LONG = f"""
SELECT r.id, r.job_id, extract(epoch FROM now() - r.started_at)::float8, {_RULES}
  FROM jobs_jobrun AS r JOIN jobs_job AS j ON j.id = r.job_id
 WHERE r.status = 'running' AND r.trigger <> 'continuous' AND r.started_at IS NOT NULL
   AND r.started_at < now() - make_interval(secs => least(
         j.max_duration, coalesce(j.soft_time_limit, j.time_limit) + %(grace)s, %(floor)s))
"""

# Each job's latest success among those of the last SHORT_LOOKBACK seconds (an index range of
# jobrun_status_slot), the one that says whether its runs are too short now.
_LATEST_SUCCESSES = f"""
SELECT DISTINCT ON (r.job_id) r.id, r.job_id,
       extract(epoch FROM r.finished_at - r.started_at)::float8, {_RULES}
  FROM jobs_jobrun AS r JOIN jobs_job AS j ON j.id = r.job_id
 WHERE r.status = 'succeeded' AND r.scheduled_for > now() - make_interval(secs => %(lookback)s)
   AND r.trigger <> 'continuous' AND r.started_at IS NOT NULL AND r.finished_at IS NOT NULL
 ORDER BY r.job_id, r.finished_at DESC, r.id DESC
"""

# The last SAMPLES successful durations of each job, but for one run of it (the one judged): one
# statement for every job a pass judges, a backward scan of jobrun_job_slot each.
_DURATIONS = """
SELECT t.job_id, coalesce(d.durations, '{}')
  FROM unnest(%(jobs)s::bigint[], %(but)s::bigint[]) AS t(job_id, but)
 CROSS JOIN LATERAL (
       SELECT array_agg(extract(epoch FROM r.finished_at - r.started_at)::float8)
         FROM (SELECT r.finished_at, r.started_at FROM jobs_jobrun AS r
                WHERE r.job_id = t.job_id AND r.status = 'succeeded'
                  AND r.started_at IS NOT NULL AND r.finished_at IS NOT NULL
                  AND r.id IS DISTINCT FROM t.but
                ORDER BY r.scheduled_for DESC LIMIT %(samples)s) AS r) AS d(durations)
"""

# How far back maintenance looks for a job's latest success (many maintenance passes: a pass
# late by less still judges every job's latest one).
SHORT_LOOKBACK = 600.0


def baselines(runs: dict[int, int | None]) -> dict[int, Baseline | None]:
    """The baseline of each job of ``runs`` (job id: a run of it to leave out, or ``None``)."""
    if not runs:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            _DURATIONS,
            {"jobs": list(runs), "but": list(runs.values()), "samples": baseline.SAMPLES},
        )
        return {job_id: Baseline.of(durations) for job_id, durations in cursor.fetchall()}


def duration_rules(job: Job) -> DurationRules:
    """``job``'s settings for judging its runs' durations."""
    limit = job.soft_time_limit if job.soft_time_limit is not None else job.time_limit
    return DurationRules(
        limit, job.max_duration, job.long_run_factor, job.min_duration, job.baseline_alerts
    )


def baseline_of(job: Job) -> Baseline | None:
    """``job``'s baseline now (its last successes)."""
    return baselines({job.pk: None}).get(job.pk)


def _rules(row: Sequence[Any]) -> DurationRules:
    time_limit, max_duration, factor, minimum, on = row
    return DurationRules(time_limit, max_duration, factor, minimum, on)


def check_running_long() -> list[int]:
    """Open a ``running_long`` incident for each run running past its limit, while it runs;
    the run ids found."""
    with connection.cursor() as cursor:
        cursor.execute(
            _RUNNING_LONG, {"grace": baseline.LIMIT_GRACE, "floor": baseline.LONG_RUN_FLOOR}
        )
        suspects = cursor.fetchall()
    known = baselines(
        {row[1]: None for row in suspects if row[7] and row[4] is None}  # baseline_alerts on
    )
    long = []
    for run_id, job_id, age, *rules in suspects:
        limit = long_run_limit(_rules(rules), known.get(job_id))
        if limit is None or age <= limit.seconds:
            continue
        summary = f"run {run_id} has been running for {age:.0f} s, past {limit.basis}"
        long.append(run_id)
        _opened(_open_while_running(job_id, summary, run_id), summary, job_id=job_id, run_id=run_id)
    return long


def check_too_short() -> list[int]:
    """Open a ``too_short`` incident for each job whose latest success was too short, and
    resolve that of each job whose latest success was not; the run ids found too short.

    Each job's latest success decides, so however many passes see it, one incident: the same
    run joins nothing twice, and a later success within the baseline resolves it. A too-short
    success followed by a fine one before maintenance looked is not told (its incident would
    have resolved at once)."""
    with connection.cursor() as cursor:
        cursor.execute(_LATEST_SUCCESSES, {"lookback": SHORT_LOOKBACK})
        latest = cursor.fetchall()
    known = baselines({row[1]: row[0] for row in latest if row[7]})  # baseline_alerts on
    open_ = set(
        Incident.objects.filter(
            kind=IncidentKind.TOO_SHORT, resolved_at__isnull=True, job__isnull=False
        ).values_list("job_id", flat=True)
    )
    short = []
    for run_id, job_id, duration, *rules in latest:
        threshold = too_short(_rules(rules), known.get(job_id), duration)
        if threshold is None:
            if job_id in open_:
                resolve_incidents(job_id, [IncidentKind.TOO_SHORT], run_id)
            continue
        short.append(run_id)
        summary = f"run {run_id} succeeded in {duration:.3f} s, under {threshold.basis}"
        _opened(
            open_incident(job_id, IncidentKind.TOO_SHORT, AlertReason.TOO_SHORT, summary, run_id),
            summary,
            job_id=job_id,
            run_id=run_id,
        )
    return short


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

    Not overdue: a job whose silence something else explains. Its ``failing`` or
    ``running_long`` incident is open (one incident per job and cause: a bad run joins an
    ``overdue`` incident open before it, ``jobs/sql/alerts.sql``), or none of its slots in the
    window was one to run: each was outside its active period, or skipped by its calendar or a
    blackout window.
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
        kind__in=[IncidentKind.FAILING, IncidentKind.RUNNING_LONG, IncidentKind.STUCK],
        resolved_at__isnull=True,
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
