"""Run statistics for ``/metrics``: counts per job and status, and histograms of start lag
(start - slot) and duration.

Reading every run at every scrape would cost seconds on a million runs, so finished runs are
*folded*: their statistics are added to ``RunRollup`` and the run is marked ``folded``, once
(``FOR UPDATE SKIP LOCKED``: concurrent folders share the work, never count a run twice). A
scrape folds what finished since the last one, then reads the rollups plus the few runs not yet
folded (a partial index finds them). Retention deletes folded runs only, so totals outlive it.

Only runs whose function ran and ended (succeeded, failed, lost) enter the histograms; final
statuses never change, so a folded run's numbers never need correcting.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.db import connection, transaction

from jobs.models import TERMINAL_STATUSES, RunRollup, RunStatus

LAG_BUCKETS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
DURATION_BUCKETS: tuple[float, ...] = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800, 3600)
TIMED_STATUSES = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.LOST)


@dataclass
class Histogram:
    """Cumulative bucket counts (``buckets[i]``: values ≤ bounds[i]; the last: all) and sum."""

    bounds: tuple[float, ...]
    buckets: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.buckets:
            self.buckets = [0] * (len(self.bounds) + 1)

    @property
    def count(self) -> int:
        return self.buckets[-1]

    def add(self, buckets: Sequence[int], total: float) -> None:
        if len(buckets) != len(self.buckets):
            return  # totals kept under other bucket bounds cannot be merged; see RunRollup
        self.buckets = [a + b for a, b in zip(self.buckets, buckets, strict=True)]
        self.total += total


@dataclass
class Stats:
    """One (job, status) group."""

    job_id: int
    status: str
    count: int = 0
    lag: Histogram = field(default_factory=lambda: Histogram(LAG_BUCKETS))
    duration: Histogram = field(default_factory=lambda: Histogram(DURATION_BUCKETS))


def _bucket_columns(column: str, bounds: tuple[float, ...]) -> str:
    parts = [f"count(*) FILTER (WHERE {column} <= {float(bound)!r})" for bound in bounds]
    parts += [f"count({column})", f"coalesce(sum({column}), 0)"]
    return ", ".join(parts)


_TIMED = ", ".join(f"'{status.value}'" for status in TIMED_STATUSES)

_STATS_SQL = f"""
SELECT job_id, status, count(*),
       {_bucket_columns("lag", LAG_BUCKETS)},
       {_bucket_columns("duration", DURATION_BUCKETS)}
  FROM (SELECT job_id, status,
               CASE WHEN status IN ({_TIMED}) AND started_at IS NOT NULL
                    THEN extract(epoch FROM started_at - scheduled_for)::float8 END AS lag,
               CASE WHEN status IN ({_TIMED}) AND started_at IS NOT NULL
                         AND finished_at IS NOT NULL
                    THEN extract(epoch FROM finished_at - started_at)::float8 END AS duration
          FROM jobs_jobrun
         WHERE {{where}}) AS r
 GROUP BY job_id, status
"""


_TERMINAL = ", ".join(f"'{status.value}'" for status in sorted(TERMINAL_STATUSES))

# Finished runs not yet folded, oldest first; rows another folder holds are skipped.
_PICK_UNFOLDED = f"""
SELECT id FROM jobs_jobrun
 WHERE NOT folded AND status IN ({_TERMINAL})
 ORDER BY id LIMIT %s
   FOR UPDATE SKIP LOCKED
"""

FOLD_BATCH = 20_000


def recorded(run_ids: Sequence[int] | None = None) -> list[Stats]:
    """Statistics of the runs not yet folded (or of the runs ``run_ids``)."""
    where, params = ("NOT folded", []) if run_ids is None else ("id = ANY(%s)", [list(run_ids)])
    with connection.cursor() as cursor:
        cursor.execute(_STATS_SQL.format(where=where), params)
        rows = cursor.fetchall()
    stats = []
    lag_width = len(LAG_BUCKETS) + 2
    for row in rows:
        item = Stats(job_id=row[0], status=row[1], count=row[2])
        lag, duration = row[3 : 3 + lag_width], row[3 + lag_width :]
        item.lag.add([int(n) for n in lag[:-1]], float(lag[-1]))
        item.duration.add([int(n) for n in duration[:-1]], float(duration[-1]))
        stats.append(item)
    return stats


def rolled_up() -> list[Stats]:
    """The totals of folded runs."""
    stats = []
    for rollup in RunRollup.objects.all():
        item = Stats(job_id=rollup.job_id, status=rollup.status, count=rollup.count)
        item.lag.add(rollup.lag_buckets, rollup.lag_sum)
        item.duration.add(rollup.duration_buckets, rollup.duration_sum)
        stats.append(item)
    return stats


def totals() -> list[Stats]:
    """Folded plus not-yet-folded runs, per (job, status): numbers that never go down."""
    merged: dict[tuple[int, str], Stats] = {}
    for item in [*rolled_up(), *recorded()]:
        into = merged.setdefault((item.job_id, item.status), Stats(item.job_id, item.status))
        into.count += item.count
        into.lag.add(item.lag.buckets, item.lag.total)
        into.duration.add(item.duration.buckets, item.duration.total)
    return list(merged.values())


def fold(budget_seconds: float | None = 1.0, batch_size: int = FOLD_BATCH) -> int:
    """Add finished, unfolded runs to ``RunRollup``, a batch per transaction, until none is
    left or ``budget_seconds`` passed (``None``: no limit). Returns how many were folded."""
    started = time.monotonic()
    folded = 0
    while True:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(_PICK_UNFOLDED, [batch_size])
                ids = [row[0] for row in cursor.fetchall()]
            if not ids:
                return folded
            _add_to_rollups(recorded(ids))
            with connection.cursor() as cursor:
                cursor.execute("UPDATE jobs_jobrun SET folded = true WHERE id = ANY(%s)", [ids])
        folded += len(ids)
        out_of_time = budget_seconds is not None and time.monotonic() - started > budget_seconds
        if len(ids) < batch_size or out_of_time:
            return folded


def _add_to_rollups(items: list[Stats]) -> None:
    # Rollup rows are locked in one order, so two folders cannot deadlock on them.
    for item in sorted(items, key=lambda stats: (stats.job_id, stats.status)):
        rollup, _ = RunRollup.objects.select_for_update().get_or_create(
            job_id=item.job_id, status=item.status
        )
        lag = _stored(LAG_BUCKETS, rollup.lag_buckets, rollup.lag_sum)
        duration = _stored(DURATION_BUCKETS, rollup.duration_buckets, rollup.duration_sum)
        lag.add(item.lag.buckets, item.lag.total)
        duration.add(item.duration.buckets, item.duration.total)
        rollup.count += item.count
        rollup.lag_buckets, rollup.lag_sum = lag.buckets, lag.total
        rollup.duration_buckets, rollup.duration_sum = duration.buckets, duration.total
        rollup.save()


def _stored(bounds: tuple[float, ...], buckets: list[int], total: float) -> Histogram:
    """A rolled-up histogram; one kept under other bucket bounds starts again from zero."""
    if len(buckets) != len(bounds) + 1:
        return Histogram(bounds)
    return Histogram(bounds, list(buckets), total)
