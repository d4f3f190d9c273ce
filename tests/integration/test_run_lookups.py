"""A statement about one run finds it by its primary key, whatever the planner believes about
statuses (jobs.guard.run_records, migration 0025).

The trap: with ``WHERE id = $1 AND status = 'scheduled'`` and statistics that say few runs have
that status (here: the run table analysed when every run had finished, a quiet hour),
the planner walks the status index and filters on the id, so each claim, finish and alerts
trigger reads every run of that status. Read back from PostgreSQL's own index counters."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db import connection
from django.utils import timezone

from jobs.guard import run_records
from jobs.models import Job, JobRun, RunStatus, Trigger

pytestmark = pytest.mark.django_db(transaction=True)

RUNS = 60
FINISHED_BEFORE = 3000


def _index_scans() -> dict[str, int]:
    """Scans of each run-table index so far, flushed from this backend's counters first."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    with connection.cursor() as cursor:  # the flush happens as the backend goes idle
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT indexrelname, idx_scan FROM pg_stat_user_indexes WHERE relname = 'jobs_jobrun'"
        )
        return dict(cursor.fetchall())


@pytest.fixture
def statistics_of_a_quiet_hour(make_job: Callable[..., Job]) -> Job:
    """A job with many finished runs and the run table analysed then: to the planner, no run
    is scheduled or running."""
    job = make_job("by-id", schedule=None, overlap="skip")
    now = timezone.now()
    JobRun.objects.bulk_create(
        JobRun(job=job, scheduled_for=now, trigger=Trigger.MANUAL, status=RunStatus.SUCCEEDED)
        for _ in range(FINISHED_BEFORE)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_jobrun")
    return job


def test_claims_and_finishes_never_walk_the_status_index(
    statistics_of_a_quiet_hour: Job,
) -> None:
    job = statistics_of_a_quiet_hour
    now = timezone.now()
    runs = JobRun.objects.bulk_create(
        JobRun(job=job, scheduled_for=now, trigger=Trigger.MANUAL) for _ in range(RUNS)
    )
    before = _index_scans()

    for index, run in enumerate(runs):
        claim = run_records.claim(run.pk, node="n", pid=1, task_id="t", holder=f"n:1:{run.pk}")
        assert claim is not None and claim.lease is not None
        # Failures too, so the alerts trigger opens and resolves incidents on the way.
        status = RunStatus.FAILED if index % 3 == 0 else RunStatus.SUCCEEDED
        finished = run_records.finish_fenced(
            run.pk, key=claim.lease.key, token=claim.lease.token, status=status
        )
        assert finished.status == status
        assert run_records.claim(run.pk, node="n", pid=1, task_id="t2") is None  # a repeat

    after = _index_scans()
    assert after["jobrun_status_slot"] == before["jobrun_status_slot"], (
        "a claim, finish or the alerts trigger looked a run up through the status index"
    )
    assert after["jobs_jobrun_pkey"] - before["jobs_jobrun_pkey"] >= 3 * RUNS
    assert JobRun.objects.filter(status=RunStatus.FAILED).count() == RUNS // 3
