"""The admin dashboard (``/admin/jobs/dashboard/``): what the cluster did lately, as a picture.

Runs per time bucket by status (a stacked bar chart drawn here as inline SVG: no JavaScript,
nothing fetched from a CDN), start-lag percentiles per job, the failed/missed/lost runs of the
last 24 hours, the nodes and beats with their heartbeats, and where each continuous job runs.
Every number is one query on the same tables the cluster writes.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib import admin
from django.contrib.auth.decorators import permission_required
from django.db import connection
from django.db.models import Count, Min
from django.db.models.functions import TruncMinute
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from jobs.conf import get_ops_conf
from jobs.continuous.nodes import with_liveness
from jobs.database.database_clock import age_of
from jobs.models import (
    LIVE_LEASE,
    BeatHeartbeat,
    Incident,
    Job,
    JobKind,
    JobRun,
    Lease,
    Node,
    RunStatus,
)

WINDOWS_HOURS = (1, 3, 6, 12, 24)
DEFAULT_HOURS = 3
# The shortest chart: a few minutes of a young install still get bars wide enough to read.
MIN_WINDOW = timedelta(minutes=10)
MAX_BARS = 180
PROBLEM_STATUSES = (RunStatus.FAILED, RunStatus.MISSED, RunStatus.LOST)
# Runs whose function started: their lag says how late the cluster started work.
STARTED_STATUSES = (RunStatus.RUNNING, RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.LOST)

# Stacking order (bottom first) and a colour each, distinct enough to tell apart in a stack.
STATUS_COLOURS: dict[str, str] = {
    RunStatus.SUCCEEDED: "#2e7d32",
    RunStatus.RUNNING: "#1565c0",
    RunStatus.SCHEDULED: "#90a4ae",
    RunStatus.SKIPPED: "#f9a825",
    RunStatus.MISSED: "#ef6c00",
    RunStatus.FAILED: "#c62828",
    RunStatus.LOST: "#6a1b9a",
    RunStatus.CANCELLED: "#616161",
}

_CHART_WIDTH, _CHART_HEIGHT = 900, 220
_LEFT, _BOTTOM, _TOP = 40, 24, 10
# Room for half a time label ("07:20", centred on its tick) past the last bar.
_RIGHT = 20


@dataclass(frozen=True)
class Series:
    """Counts per status per bucket, buckets ``bucket`` apart starting at ``start``."""

    start: datetime
    bucket: timedelta
    buckets: int
    counts: dict[int, dict[str, int]]  # bucket index → status → runs

    def total(self, index: int) -> int:
        return sum(self.counts.get(index, {}).values())

    def totals_by_status(self) -> dict[str, int]:
        totals: dict[str, int] = defaultdict(int)
        for per_status in self.counts.values():
            for status, count in per_status.items():
                totals[status] += count
        return {status: totals[status] for status in STATUS_COLOURS if totals[status]}


def chart_window(now: datetime, hours: int) -> timedelta:
    """The last ``hours``, or less when the first run is younger: an install a few minutes old
    fills the chart instead of a sliver at the right edge of it. Whole minutes, at least
    ``MIN_WINDOW``."""
    window = timedelta(hours=hours)
    first = JobRun.objects.aggregate(first=Min("scheduled_for"))["first"]
    if first is None or _chart_end(now) - first >= window:
        return window
    minutes = math.ceil((_chart_end(now) - first) / timedelta(minutes=1))
    return max(MIN_WINDOW, timedelta(minutes=minutes))


def _chart_end(now: datetime) -> datetime:
    """The end of the minute ``now`` is in: the last bar holds the current minute."""
    return now.replace(second=0, microsecond=0) + timedelta(minutes=1)


def runs_per_bucket(now: datetime, window: timedelta) -> Series:
    """Runs by slot and status over the last ``window`` (whole minutes), at most ``MAX_BARS``
    buckets."""
    window_minutes = int(window / timedelta(minutes=1))
    minutes = max(1, math.ceil(window_minutes / MAX_BARS))
    bucket = timedelta(minutes=minutes)
    end = _chart_end(now)
    buckets = math.ceil(window_minutes / minutes)
    start = end - buckets * bucket
    rows = (
        JobRun.objects.filter(scheduled_for__gte=start, scheduled_for__lt=end)
        .annotate(minute=TruncMinute("scheduled_for"))
        .values_list("minute", "status")
        .annotate(n=Count("id"))
        .order_by()
    )
    counts: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for minute, status, n in rows:
        counts[int((minute - start) / bucket)][status] += n
    return Series(start=start, bucket=bucket, buckets=buckets, counts=dict(counts))


def chart_svg(series: Series) -> SafeString:
    """A stacked bar chart of ``series``, with axes, hour labels and a tooltip per bar."""
    plot_w = _CHART_WIDTH - _LEFT - _RIGHT
    plot_h = _CHART_HEIGHT - _BOTTOM - _TOP
    ticks = round_ticks(max([series.total(i) for i in range(series.buckets)] + [1]))
    top = ticks[-1]
    bar_w = plot_w / series.buckets
    parts = [
        f'<svg class="runs-chart" role="img" viewBox="0 0 {_CHART_WIDTH} {_CHART_HEIGHT}" '
        f'width="100%" xmlns="http://www.w3.org/2000/svg" font-size="11" '
        f'font-family="sans-serif"><title>Runs per {_bucket_words(series.bucket)} by status'
        "</title>"
    ]
    for value in ticks:
        y = _TOP + plot_h * (1 - value / top)
        parts.append(
            f'<line x1="{_LEFT}" x2="{_LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" '
            'stroke="#ddd" stroke-width="1"/>'
            f'<text class="y-tick" x="{_LEFT - 4}" y="{y + 4:.1f}" text-anchor="end" '
            f'fill="#666">{value}</text>'
        )
    for index in range(series.buckets):
        per_status = series.counts.get(index, {})
        x = _LEFT + index * bar_w
        y = _TOP + plot_h
        when = (series.start + index * series.bucket).strftime("%H:%M")
        for status, colour in STATUS_COLOURS.items():
            count = per_status.get(status, 0)
            if not count:
                continue
            height = plot_h * count / top
            y -= height
            parts.append(
                f'<rect class="bar status-{status}" x="{x:.2f}" y="{y:.2f}" '
                f'width="{max(bar_w - 1, 0.5):.2f}" height="{height:.2f}" fill="{colour}">'
                f"<title>{when} UTC: {count} {escape(status)}</title></rect>"
            )
    span = series.buckets * series.bucket
    step = _label_step(span)
    # The first label on a round time (a multiple of the step since midnight).
    minute_of_day = series.start.hour * 60 + series.start.minute
    tick = series.start + timedelta(minutes=-minute_of_day % int(step.total_seconds() // 60))
    while tick <= series.start + span:
        x = _LEFT + (tick - series.start) / series.bucket * bar_w
        parts.append(
            f'<text x="{x:.1f}" y="{_CHART_HEIGHT - 6}" text-anchor="middle" fill="#666">'
            f"{tick:%H:%M}</text>"
        )
        tick += step
    parts.append("</svg>")
    return mark_safe("".join(parts))  # numbers and escaped status names only


def round_ticks(peak: int, most: int = 5) -> list[int]:
    """The y-axis: 0 up to ``peak`` (at least 1) in at most ``most`` round steps: 1, 2 or 5
    times a power of ten, the first multiple at or above ``peak`` on top."""
    magnitude = 1
    while True:
        for multiple in (1, 2, 5):
            step = multiple * magnitude
            steps = max(1, math.ceil(peak / step))
            if steps <= most:
                return [step * i for i in range(steps + 1)]
        magnitude *= 10


def _label_step(span: timedelta) -> timedelta:
    """About six time labels along the axis."""
    for minutes in (1, 2, 5, 10, 30, 60, 120, 240):
        if span / timedelta(minutes=minutes) <= 8:
            return timedelta(minutes=minutes)
    return timedelta(hours=6)


def _window_words(window: timedelta, hours: int) -> str:
    if window == timedelta(hours=hours):
        return f"last {hours} h"
    return f"last {int(window / timedelta(minutes=1))} min (no run is older)"


def _bucket_words(bucket: timedelta) -> str:
    minutes = int(bucket.total_seconds() // 60)
    return "minute" if minutes == 1 else f"{minutes} minutes"


# Percentiles by the database (ordered-set aggregates), per job and for all jobs (ROLLUP).
# started_at has no index (a claim writes it; one more index would cost every run), but a run
# starts at most its job's start deadline after its slot (a later claim records it missed), so
# the slot index bounds the window: runs slotted from `since` minus the longest deadline.
# MATERIALIZED: that range once, then a sort by job; left to itself the planner walks the job
# index instead, touching every page once per job.
_LAG_PERCENTILES = """
WITH r AS MATERIALIZED (
    SELECT job_id, extract(epoch FROM started_at - scheduled_for)::float8 AS lag
      FROM jobs_jobrun
     WHERE scheduled_for >= %(since)s::timestamptz - make_interval(
               secs => (SELECT coalesce(max(start_deadline), 0) FROM jobs_job))
       AND started_at >= %(since)s AND status = ANY(%(statuses)s)
)
SELECT job_id, count(*),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY lag),
       percentile_cont(0.9) WITHIN GROUP (ORDER BY lag),
       percentile_cont(0.99) WITHIN GROUP (ORDER BY lag),
       max(lag)
  FROM r
 GROUP BY ROLLUP (job_id)
"""


@dataclass(frozen=True)
class LagRow:
    job: str | None  # None: all jobs
    runs: int
    p50: float
    p90: float
    p99: float
    max: float


def lag_percentiles(since: datetime) -> list[LagRow]:
    """All jobs first, then each job by name."""
    with connection.cursor() as cursor:
        cursor.execute(
            _LAG_PERCENTILES, {"since": since, "statuses": [s.value for s in STARTED_STATUSES]}
        )
        rows = cursor.fetchall()
    names = dict(Job.objects.filter(pk__in=[row[0] for row in rows]).values_list("id", "name"))
    result = [
        LagRow(None if job_id is None else names.get(job_id, f"#{job_id}"), *numbers)
        for job_id, *numbers in rows
    ]
    return sorted(result, key=lambda row: (row.job is not None, row.job or ""))


def problems(since: datetime) -> tuple[dict[str, int], list[JobRun]]:
    recent = JobRun.objects.filter(scheduled_for__gte=since, status__in=PROBLEM_STATUSES)
    counts = dict(recent.values_list("status").annotate(n=Count("id")).order_by())
    latest = list(recent.select_related("job").order_by("-scheduled_for", "-id")[:10])
    return {status: counts.get(status, 0) for status in PROBLEM_STATUSES}, latest


def node_rows() -> list[dict[str, Any]]:
    running = dict(
        JobRun.objects.filter(status=RunStatus.RUNNING)
        .values_list("node")
        .annotate(n=Count("id"))
        .order_by()
    )
    nodes = with_liveness(Node.objects.all()).annotate(age=age_of("last_heartbeat"))
    return [
        {
            "node": node,
            "state": node.liveness,
            "age": node.age,
            "running": running.get(node.name, 0),
        }
        for node in nodes
    ]


def beat_rows() -> list[dict[str, Any]]:
    stale = timedelta(seconds=get_ops_conf().beat_stale_after)
    rows = []
    for beat in BeatHeartbeat.objects.annotate(age=age_of("last_seen")).filter(
        age__lt=timedelta(hours=1)
    ):
        mean = beat.tick_seconds / beat.ticks * 1000 if beat.ticks else None
        rows.append({"beat": beat, "live": beat.age < stale, "age": beat.age, "mean_tick_ms": mean})
    return rows


def continuous_rows() -> list[dict[str, Any]]:
    jobs = list(Job.objects.filter(kind=JobKind.CONTINUOUS))
    running: dict[int, JobRun] = {}
    for run in JobRun.objects.filter(job__in=jobs, status=RunStatus.RUNNING).order_by(
        "job_id", "-started_at"
    ):
        running.setdefault(run.job_id, run)
    leases = {
        lease.key: lease
        for lease in Lease.objects.filter(LIVE_LEASE, key__in=[job.lock_key for job in jobs])
    }
    return [
        {"job": job, "run": running.get(job.pk), "lease": leases.get(job.lock_key)} for job in jobs
    ]


# Behind the admin's staff login (project/urls.py); being staff is not enough: the page shows
# every job's runs, errors and nodes, what the job list shows only with this permission.
@permission_required("jobs.view_job", raise_exception=True)
def dashboard_view(request: HttpRequest) -> HttpResponse:
    try:
        hours = int(request.GET.get("hours", DEFAULT_HOURS))
    except ValueError:
        hours = DEFAULT_HOURS
    if hours not in WINDOWS_HOURS:
        hours = DEFAULT_HOURS
    now = timezone.now()
    day_ago = now - timedelta(hours=24)
    window = chart_window(now, hours)
    series = runs_per_bucket(now, window)
    counts, latest_problems = problems(day_ago)
    context = {
        **admin.site.each_context(request),
        "title": "Jobs dashboard",
        "now": now,
        "hours": hours,
        "window_words": _window_words(window, hours),
        "windows": WINDOWS_HOURS,
        "chart": chart_svg(series),
        "bucket_words": _bucket_words(series.bucket),
        "legend": [
            (status, STATUS_COLOURS[status], count)
            for status, count in series.totals_by_status().items()
        ],
        "lag": lag_percentiles(now - timedelta(hours=hours)),
        "problem_counts": counts,
        "problem_runs": latest_problems,
        "nodes": node_rows(),
        "beats": beat_rows(),
        "continuous": continuous_rows(),
        "incidents": Incident.objects.filter(resolved_at__isnull=True).select_related("job")[:50],
        "runs_url": reverse("admin:jobs_jobrun_changelist"),
    }
    return render(request, "admin/jobs/dashboard.html", context)
