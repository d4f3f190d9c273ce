"""Migration 0039 (duration baselines): "stuck" becomes "running_long" in the rows it finds (an
incident's kind and reason, a job's alert reasons), an open one still resolved by its run's end;
and back again, the too-short incidents (a kind 0038 does not know) dropped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from jobs.models import Incident, Job, JobRun, RunStatus
from jobs.values.names import stored_skeleton
from tests.support.migrations import migrated_back_to

BEFORE = ("jobs", "0038_pause_reason_and_end")
AFTER = ("jobs", "0039_duration_baselines")


@pytest.fixture
def before_0039(transactional_db: None) -> Iterator[MigrationExecutor]:
    with migrated_back_to(BEFORE) as executor:
        yield executor


def test_migration_0039_renames_stuck_to_running_long_and_back(
    before_0039: MigrationExecutor,
) -> None:
    apps = before_0039.loader.project_state([BEFORE]).apps
    OldJob, OldRun = apps.get_model("jobs", "Job"), apps.get_model("jobs", "JobRun")
    OldIncident = apps.get_model("jobs", "Incident")
    job = OldJob.objects.create(
        name="wedged", name_skeleton=stored_skeleton("wedged"), task="tests.record",
        kind="continuous", alert_reasons=["lost", "stuck"],
    )  # fmt: skip
    now = timezone.now()
    run = OldRun.objects.create(
        job=job, scheduled_for=now, trigger="manual", status="running", started_at=now
    )
    OldIncident.objects.create(
        job=job, kind="stuck", reason="stuck", summary="old", first_run_id=run.pk,
        last_run_id=run.pk,
    )  # fmt: skip

    before_0039.loader.build_graph()
    before_0039.migrate([AFTER])

    incident = Incident.objects.get()
    assert (incident.kind, incident.reason) == ("running_long", "running_long")
    assert incident.get_kind_display().startswith("running long")
    assert Job.objects.get().alert_reasons == ["lost", "running_long"]
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, finished_at=timezone.now())
    incident.refresh_from_db()
    assert incident.resolved_by_run_id == run.pk  # the new functions resolve it by its run
    Incident.objects.create(job_id=job.pk, kind="too_short", reason="too_short")
    Job.objects.update(alert_reasons=["too_short", "running_long"])

    before_0039.loader.build_graph()
    before_0039.migrate([BEFORE])

    assert list(OldIncident.objects.values_list("kind", "reason")) == [("stuck", "stuck")]
    assert OldJob.objects.get().alert_reasons == ["stuck"]
