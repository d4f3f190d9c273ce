"""The checker against a database that lost its guarantee: with the one-run-per-slot index
dropped (inside the test's transaction, rolled back after it: the database is the test's own),
two runs of one slot are recorded, the real runner executes both, and the checker, reading
only the job's own lines and the run rows, reports the slot as executed twice."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from jobs.audit import Actor
from jobs.guard.runner import execute_run
from jobs.models import JobRun, Trigger
from jobs.schedule.kinds import Every
from jobs.services import JobDefinition, create_job
from tests.nemesis import checker
from tests.nemesis.checker import JobShape, RunRow

pytestmark = pytest.mark.django_db


def _rows() -> list[RunRow]:
    fields = ("id", "job__name", "scheduled_for", "trigger", "status", "attempt", "retry_of_id",
              "fencing_token")  # fmt: skip
    return [RunRow(*row) for row in JobRun.objects.values_list(*fields)]


def test_the_checker_reports_a_slot_run_twice_once_the_unique_index_is_gone(
    tmp_path: Path,
) -> None:
    import tests.support.jobs_nemesis  # noqa: F401  (registers tests.nemesis.work)

    log = tmp_path / "executions.jsonl"
    definition = JobDefinition(name="daily", task="tests.nemesis.work", schedule=Every(86400),
                               kwargs={"log": str(log)})  # fmt: skip
    job = create_job(definition, actor=Actor.code("tests"))
    slot = timezone.now().replace(microsecond=0)
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX one_run_per_slot")
    # Two beats firing one slot, as the database no longer stops them.
    runs = [JobRun.objects.create(job=job, scheduled_for=slot, trigger=Trigger.SCHEDULED)
            for _ in range(2)]  # fmt: skip
    for run in runs:
        execute_run(run.pk, task_id=f"task-{run.pk}", node="node-a")

    executions = checker.parse_executions(log.read_text().splitlines())
    assert [e.run for e in executions] == [run.pk for run in runs]
    found = checker.duplicate_executions(executions, _rows(), {"daily": JobShape("daily", 86400)})
    assert [v.check for v in found] == ["slot-twice"]
    assert f"run {runs[0].pk} is succeeded" in found[0].message
