"""Run statistics (jobs.upkeep.rollups), against real PostgreSQL: cumulative histograms of start
lag and duration per job and status, folded into ``RunRollup`` once per run so that the totals
never go down."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import Job, JobRun, RunRollup, RunStatus
from jobs.upkeep import rollups
from jobs.upkeep.rollups import DURATION_BUCKETS, LAG_BUCKETS, Histogram
from tests.support.threads_at_once import at_once

pytestmark = pytest.mark.django_db


def _run(job: Job, status: RunStatus, lag: float | None = None, duration: float = 0.0) -> JobRun:
    slot = timezone.now() - timedelta(hours=1)
    started = None if lag is None else slot + timedelta(seconds=lag)
    return JobRun.objects.create(
        job=job,
        scheduled_for=slot,
        status=status,
        started_at=started,
        finished_at=None if started is None else started + timedelta(seconds=duration),
    )


def _by_key(stats: list[rollups.Stats]) -> dict[tuple[int, str], rollups.Stats]:
    return {(item.job_id, item.status): item for item in stats}


def test_a_histogram_counts_cumulatively_and_merges_only_its_own_bounds() -> None:
    histogram = Histogram((1.0, 2.0))
    assert histogram.buckets == [0, 0, 0] and histogram.count == 0
    histogram.add([1, 2, 3], 4.5)
    histogram.add([0, 1, 1], 1.5)
    assert (histogram.buckets, histogram.count, histogram.total) == ([1, 3, 4], 4, 6.0)
    histogram.add([1, 1, 1, 1], 9.0)  # kept under other bounds: not merged
    assert (histogram.buckets, histogram.total) == ([1, 3, 4], 6.0)


def test_recorded_buckets_lag_and_duration_of_runs_that_ran(make_job: Callable[..., Job]) -> None:
    job = make_job("report")
    _run(job, RunStatus.SUCCEEDED, lag=0.3, duration=2.0)
    _run(job, RunStatus.SUCCEEDED, lag=20.0, duration=0.005)
    stats = _by_key(rollups.recorded())
    item = stats[(job.pk, "succeeded")]
    assert item.count == 2
    # lag 0.3 s falls from the 0.5 s bucket on, 20 s from the 30 s one; the last: all.
    assert item.lag.buckets == [0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2]
    assert item.lag.total == pytest.approx(20.3)
    assert item.duration.buckets == [1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2]
    assert item.duration.total == pytest.approx(2.005)
    assert len(item.lag.buckets) == len(LAG_BUCKETS) + 1
    assert len(item.duration.buckets) == len(DURATION_BUCKETS) + 1


def test_runs_whose_function_did_not_run_and_end_are_counted_not_timed(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("report")
    _run(job, RunStatus.SKIPPED, lag=1.0, duration=1.0)
    _run(job, RunStatus.LOST)  # never started
    _run(job, RunStatus.RUNNING, lag=1.0)
    stats = _by_key(rollups.recorded())
    for status in ("skipped", "lost", "running"):
        item = stats[(job.pk, status)]
        assert item.count == 1 and item.lag.count == 0 and item.duration.count == 0


def test_recorded_of_given_runs_reads_only_those(make_job: Callable[..., Job]) -> None:
    job = make_job("report")
    chosen = _run(job, RunStatus.FAILED, lag=1.0, duration=1.0)
    _run(job, RunStatus.FAILED, lag=1.0, duration=1.0)
    (item,) = rollups.recorded([chosen.pk])
    assert (item.job_id, item.status, item.count) == (job.pk, "failed", 1)


def test_fold_moves_finished_runs_into_the_rollups_once(make_job: Callable[..., Job]) -> None:
    job = make_job("report")
    for lag in (0.3, 3.0, 30.0):
        _run(job, RunStatus.SUCCEEDED, lag=lag, duration=1.0)
    running = _run(job, RunStatus.RUNNING, lag=0.1)
    recorded = _by_key(rollups.recorded())[(job.pk, "succeeded")]
    assert rollups.fold(budget_seconds=None) == 3
    assert list(JobRun.objects.filter(folded=False)) == [running]
    assert rollups.fold(budget_seconds=None) == 0
    (rolled,) = rollups.rolled_up()
    assert (rolled.job_id, rolled.status, rolled.count) == (job.pk, "succeeded", 3)
    assert rolled.lag.buckets == recorded.lag.buckets
    assert rolled.lag.total == pytest.approx(recorded.lag.total)
    assert rolled.duration.buckets == recorded.duration.buckets


def test_totals_add_the_rollups_and_the_runs_not_yet_folded(make_job: Callable[..., Job]) -> None:
    job = make_job("report")
    _run(job, RunStatus.SUCCEEDED, lag=0.3, duration=1.0)
    rollups.fold(budget_seconds=None)
    _run(job, RunStatus.SUCCEEDED, lag=0.3, duration=1.0)
    _run(job, RunStatus.FAILED, lag=0.3, duration=1.0)
    totals = _by_key(rollups.totals())
    assert totals[(job.pk, "succeeded")].count == 2
    assert totals[(job.pk, "succeeded")].lag.count == 2
    assert totals[(job.pk, "succeeded")].duration.total == pytest.approx(2.0)
    assert totals[(job.pk, "failed")].count == 1


def test_fold_works_in_batches_until_none_is_left(make_job: Callable[..., Job]) -> None:
    job = make_job("report")
    for _ in range(5):
        _run(job, RunStatus.FAILED, lag=1.0, duration=1.0)
    assert rollups.fold(budget_seconds=None, batch_size=2) == 5
    assert RunRollup.objects.get(job=job, status="failed").count == 5


def test_a_rollup_kept_under_other_bucket_bounds_starts_its_histograms_again(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("report")
    RunRollup.objects.create(
        job=job,
        status="succeeded",
        count=7,
        lag_buckets=[7, 7],
        lag_sum=70.0,
        duration_buckets=[7, 7],
        duration_sum=70.0,
    )
    _run(job, RunStatus.SUCCEEDED, lag=0.3, duration=1.0)
    assert rollups.fold(budget_seconds=None) == 1
    rollup = RunRollup.objects.get(job=job, status="succeeded")
    assert rollup.count == 8  # the count is kept
    assert len(rollup.lag_buckets) == len(LAG_BUCKETS) + 1 and rollup.lag_buckets[-1] == 1
    assert rollup.lag_sum == pytest.approx(0.3)
    assert len(rollup.duration_buckets) == len(DURATION_BUCKETS) + 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_folders_never_count_a_run_twice(make_job: Callable[..., Job]) -> None:
    job = make_job("report")
    start = timezone.now() - timedelta(days=1)
    JobRun.objects.bulk_create(
        JobRun(job=job, scheduled_for=start + timedelta(seconds=i), status=RunStatus.FAILED)
        for i in range(3000)
    )
    # No time budget: on a loaded machine one second may end a folder's turn early.
    folded = at_once(3, lambda: rollups.fold(budget_seconds=None, batch_size=100), timeout=60)

    assert sum(folded) == 3000
    assert RunRollup.objects.get(job=job, status=RunStatus.FAILED).count == 3000
    assert not JobRun.objects.filter(folded=False).exists()
