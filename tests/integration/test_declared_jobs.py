"""Jobs declared in code (jobs.beat.declared_jobs), on real PostgreSQL: a ``@job`` with a
schedule gets its row once; later declarations update it while nobody has edited it; an
operator's edit makes it theirs; ``enabled`` is never the code's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from jobs import registry, services
from jobs.audit import Actor
from jobs.beat import declared_jobs
from jobs.context import JobContext
from jobs.models import AuditEntry, Job
from jobs.schedule.kinds import Every

pytestmark = pytest.mark.django_db

OPERATOR = Actor.code("operator")


@pytest.fixture
def declare(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Declare ``@job(name, **options)`` in a registry of this test's own: what the code of a
    release declares (declaring a name again is the next release's declaration). No Celery
    task is registered for it: syncing rows sends nothing, and later tests must not see one."""
    monkeypatch.setattr(registry, "_REGISTRY", {})
    monkeypatch.setattr(registry, "_register_celery_task", lambda name: None)

    def declare_job(name: str, **options: Any) -> None:
        def report(ctx: JobContext) -> None:
            """A declared job."""

        registry.job(name, **options)(report)

    return declare_job


def _job(name: str) -> Job:
    return Job.objects.select_related("periodic_task__interval").get(name=name)


def test_a_declared_job_gets_its_row_once(declare: Callable[..., None]) -> None:
    declare("report", every="10m", max_retries=2)
    assert declared_jobs.sync_declared_jobs() == ["report"]
    job = _job("report")
    assert job.managed_by_code and job.enabled and job.max_retries == 2
    assert services.definition_of(job) == Every(600)
    (entry,) = AuditEntry.objects.filter(job_name="report")
    assert (entry.action, entry.actor) == ("add", "code:declaration")
    assert declared_jobs.sync_declared_jobs() == []  # nothing changed: nothing written
    assert AuditEntry.objects.filter(job_name="report").count() == 1


def test_a_function_declared_without_a_schedule_gets_no_row(
    declare: Callable[..., None],
) -> None:
    declare("helper")
    assert declared_jobs.sync_declared_jobs() == []
    assert not Job.objects.exists()


def test_a_changed_declaration_updates_the_row_nobody_edited_but_not_its_pause(
    declare: Callable[..., None],
) -> None:
    declare("extract", every="1h")
    declare("report", every="10m")
    declared_jobs.sync_declared_jobs()
    services.pause("report", actor=OPERATOR)  # pausing is no edit
    declare("report", every="5m", max_retries=3, after=["extract"])
    assert declared_jobs.sync_declared_jobs() == ["report"]
    job = _job("report")
    assert services.definition_of(job) == Every(300) and job.max_retries == 3
    assert [upstream.name for upstream in job.upstreams.all()] == ["extract"]
    assert job.managed_by_code and not job.enabled
    assert AuditEntry.objects.filter(job_name="report", actor="code:declaration").count() == 2


def test_a_row_an_operator_edited_is_theirs(declare: Callable[..., None]) -> None:
    declare("report", every="10m")
    declared_jobs.sync_declared_jobs()
    job = _job("report")
    job.managed_by_code = False  # what the admin's, the CLI's and the API's edits do
    services.save_job(job, Every(60), actor=OPERATOR)
    declare("report", every="5m")
    assert declared_jobs.sync_declared_jobs() == []
    assert services.definition_of(_job("report")) == Every(60)
