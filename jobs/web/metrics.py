"""``/metrics`` for Prometheus, computed from the database at scrape time.

The database is the one place every web, beat and worker process writes, so any web process
can answer for the whole cluster: there is no per-process state to aggregate, workers need no
exporter of their own, and Prometheus scrapes the web service only (one target is enough; more
return the same numbers). Finished runs are folded into ``RunRollup`` (``jobs.upkeep.rollups``), so
a scrape reads totals plus what finished since the last one, not every run; counters stay
monotonic across retention, which deletes folded runs only.

Access: ``Authorization: Bearer <API token>`` (``manage.py apitoken create prometheus``), a
client address in ``JOBS_METRICS_ALLOW_FROM`` (addresses or CIDR networks), or a staff session
that may view jobs: ``jobs.web.access``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import timedelta

from django.db import DatabaseError
from django.db.models import BooleanField, Count, ExpressionWrapper
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from jobs.alerts.channels import registered
from jobs.conf import get_ops_conf
from jobs.continuous.nodes import Liveness, with_liveness
from jobs.database.database_clock import age_of
from jobs.models import (
    LIVE_LEASE,
    TERMINAL_STATUSES,
    AlertDelivery,
    BeatHeartbeat,
    DeliveryState,
    Incident,
    IncidentKind,
    Job,
    Lease,
    Node,
    NodeState,
    RunStatus,
    ScheduleError,
)
from jobs.upkeep import rollups
from jobs.web import access

log = logging.getLogger(__name__)

FOLD_BUDGET_SECONDS = 1.0
# Beats that stopped heartbeating this long ago drop out of the per-beat series.
BEAT_SERIES_HORIZON = timedelta(hours=1)


def _buckets(histogram: rollups.Histogram) -> list[tuple[str, float]]:
    bounds = [str(float(bound)) for bound in histogram.bounds] + ["+Inf"]
    return list(zip(bounds, (float(n) for n in histogram.buckets), strict=True))


class JobsCollector(Collector):
    """Reads the run, lease, node and beat tables on every scrape."""

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        # What finished since the last scrape joins the totals (bounded: a backlog, e.g. after
        # an upgrade, is worked off over several scrapes, which meanwhile read it directly).
        rollups.fold(budget_seconds=FOLD_BUDGET_SECONDS)
        yield from self._runs()
        yield from self._leases()
        yield from self._nodes()
        yield from self._beats()
        yield from self._jobs()
        yield from self._alerts()
        cost = GaugeMetricFamily(
            "jobs_metrics_scrape_seconds", "Time this scrape spent reading the database."
        )
        cost.add_metric([], time.perf_counter() - started)
        yield cost

    def _runs(self) -> Iterator[Metric]:
        names = dict(Job.objects.values_list("id", "name"))
        finished = CounterMetricFamily(
            "jobs_runs",
            "Runs that reached a final status, by job and status (recorded plus pruned).",
            labels=["job", "status"],
        )
        active = GaugeMetricFamily(
            "jobs_runs_active", "Runs scheduled or running now, by job.", labels=["job", "status"]
        )
        contention = CounterMetricFamily(
            "jobs_lease_contention",
            "Slots skipped because the previous run still held the job's lease.",
            labels=["job"],
        )
        losses = CounterMetricFamily(
            "jobs_lease_losses",
            "Runs recorded lost: their node died or their lease lapsed mid-run.",
            labels=["job"],
        )
        lag = HistogramMetricFamily(
            "jobs_run_start_lag_seconds",
            "Seconds from the slot to the start, for runs that ran and ended.",
            labels=["job"],
        )
        duration = HistogramMetricFamily(
            "jobs_run_duration_seconds", "Seconds from start to finish.", labels=["job"]
        )
        per_job: dict[int, tuple[rollups.Histogram, rollups.Histogram]] = {}
        for item in rollups.totals():
            job = names.get(item.job_id)
            if job is None:  # deleted since the statistics were read
                continue
            if item.status in TERMINAL_STATUSES:
                finished.add_metric([job, item.status], item.count)
            else:
                active.add_metric([job, item.status], item.count)
            if item.status == RunStatus.SKIPPED:
                contention.add_metric([job], item.count)
            if item.status == RunStatus.LOST:
                losses.add_metric([job], item.count)
            job_lag, job_duration = per_job.setdefault(
                item.job_id,
                (
                    rollups.Histogram(rollups.LAG_BUCKETS),
                    rollups.Histogram(rollups.DURATION_BUCKETS),
                ),
            )
            job_lag.add(item.lag.buckets, item.lag.total)
            job_duration.add(item.duration.buckets, item.duration.total)
        for job_id, (job_lag, job_duration) in per_job.items():
            if job_lag.count:
                lag.add_metric([names[job_id]], _buckets(job_lag), job_lag.total)
            if job_duration.count:
                duration.add_metric([names[job_id]], _buckets(job_duration), job_duration.total)
        yield from (finished, active, contention, losses, lag, duration)

    def _leases(self) -> Iterator[Metric]:
        acquisitions = CounterMetricFamily(
            "jobs_lease_acquisitions",
            "Acquisitions of each lease key: its fencing token, which grows on every one.",
            labels=["key"],
        )
        held = GaugeMetricFamily(
            "jobs_lease_held", "1 while the key's lease is live (database clock).", labels=["key"]
        )
        live = ExpressionWrapper(LIVE_LEASE, output_field=BooleanField())
        for key, token, is_live in Lease.objects.annotate(live=live).values_list(
            "key", "token", "live"
        ):
            acquisitions.add_metric([key], token)
            held.add_metric([key], 1.0 if is_live else 0.0)
        yield from (acquisitions, held)

    def _nodes(self) -> Iterator[Metric]:
        age = GaugeMetricFamily(
            "jobs_node_heartbeat_age_seconds",
            "Seconds since each node's last heartbeat (nodes not stopped).",
            labels=["node"],
        )
        live = 0
        nodes = with_liveness(Node.objects.exclude(state=NodeState.STOPPED)).annotate(
            age=age_of("last_heartbeat")
        )
        for node in nodes:
            age.add_metric([node.name], node.age.total_seconds())
            live += node.liveness == Liveness.ALIVE
        count = GaugeMetricFamily(
            "jobs_nodes_live", "Nodes alive: none of their last 3 heartbeats missed."
        )
        count.add_metric([], live)
        yield from (count, age)

    def _beats(self) -> Iterator[Metric]:
        stale = timedelta(seconds=get_ops_conf().beat_stale_after)
        ticks = CounterMetricFamily("jobs_beat_ticks", "Ticks of each beat.", labels=["beat"])
        cost = CounterMetricFamily(
            "jobs_beat_tick_seconds", "Seconds each beat spent in its ticks.", labels=["beat"]
        )
        slowest = GaugeMetricFamily(
            "jobs_beat_tick_max_seconds", "Each beat's slowest tick.", labels=["beat"]
        )
        age = GaugeMetricFamily(
            "jobs_beat_heartbeat_age_seconds",
            "Seconds since each beat's heartbeat.",
            labels=["beat"],
        )
        live = 0
        beats = BeatHeartbeat.objects.annotate(age=age_of("last_seen")).filter(
            age__lt=BEAT_SERIES_HORIZON
        )
        for beat in beats:
            ticks.add_metric([beat.name], beat.ticks)
            cost.add_metric([beat.name], beat.tick_seconds)
            slowest.add_metric([beat.name], beat.max_tick_seconds)
            age.add_metric([beat.name], beat.age.total_seconds())
            live += beat.age < stale
        count = GaugeMetricFamily(
            "jobs_beats_live", "Beats whose heartbeat is fresher than JOBS_BEAT_STALE_AFTER."
        )
        count.add_metric([], live)
        yield from (count, ticks, cost, slowest, age)

    def _jobs(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("jobs_jobs", "Jobs by kind and state.", labels=["kind", "state"])
        for kind, enabled, count in (
            Job.objects.values_list("kind", "enabled").annotate(n=Count("id")).order_by()
        ):
            jobs.add_metric([kind, "enabled" if enabled else "paused"], count)
        broken = GaugeMetricFamily(
            "jobs_schedule_errors",
            "Jobs no beat can schedule (their schedule row cannot be read or never fires).",
        )
        broken.add_metric([], ScheduleError.objects.count())
        each = GaugeMetricFamily(
            "jobs_schedule_error",
            "1 for each job no beat can schedule, until it is fixed.",
            labels=["job"],
        )
        for name in ScheduleError.objects.values_list("job__name", flat=True):
            each.add_metric([name], 1)
        yield from (jobs, broken, each)

    def _alerts(self) -> Iterator[Metric]:
        open_incidents = Incident.objects.filter(resolved_at__isnull=True)
        by_kind = dict(open_incidents.values_list("kind").annotate(n=Count("id")).order_by())
        kinds = GaugeMetricFamily(
            "jobs_incidents_open", "Open incidents by kind (jobs.alerts).", labels=["kind"]
        )
        for kind in IncidentKind.values:
            kinds.add_metric([kind], by_kind.get(kind, 0))
        each = GaugeMetricFamily(
            "jobs_incident_open",
            "1 for each open incident, by job (empty for the cluster's), kind and reason.",
            labels=["job", "kind", "reason"],
        )
        for job, kind, reason in open_incidents.values_list("job__name", "kind", "reason"):
            each.add_metric([job or "", kind, reason], 1)
        deliveries = GaugeMetricFamily(
            "jobs_alert_deliveries",
            "Notifications in the outbox by channel and state (pending, delivered, failed: "
            "given up, dropped: channel not configured).",
            labels=["channel", "state"],
        )
        counts = dict(
            ((channel, state), n)
            for channel, state, n in AlertDelivery.objects.values_list("channel", "state")
            .annotate(n=Count("id"))
            .order_by()
        )
        for channel in registered():
            for state in DeliveryState.values:
                deliveries.add_metric([channel, state], counts.get((channel, state), 0))
        oldest = GaugeMetricFamily(
            "jobs_alert_outbox_oldest_pending_seconds",
            "Age of the oldest notification not delivered yet (0: none waiting).",
        )
        age = (
            AlertDelivery.objects.filter(state=DeliveryState.PENDING)
            .annotate(age=age_of("created_at"))
            .order_by("-age")
            .values_list("age", flat=True)
            .first()
        )
        oldest.add_metric([], 0.0 if age is None else age.total_seconds())
        yield from (kinds, each, deliveries, oldest)


REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(JobsCollector())


def metrics_view(request: HttpRequest) -> HttpResponse:
    try:
        if not access.sees_internals(request):
            response = HttpResponse(
                "metrics need an API token (Authorization: Bearer) or an allowed address\n",
                status=401,
                content_type="text/plain",
            )
            response["WWW-Authenticate"] = 'Bearer realm="clusterjobs"'
            return response
        body = generate_latest(REGISTRY)
    except DatabaseError:
        log.exception("metrics scrape failed on the database", extra={"action": "metrics_db"})
        return HttpResponse("database unavailable\n", status=503, content_type="text/plain")
    response = HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
    response["Cache-Control"] = "no-store"
    return response
