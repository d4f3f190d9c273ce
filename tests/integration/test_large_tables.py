"""The run list at millions of runs: no COUNT(*) over the whole table and no scan for the node
filter; an estimated count says so on the page; a filtered list counts exactly."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.audit import Actor
from jobs.database import large_tables
from jobs.models import JobRun, Node, RunStatus, Trigger
from jobs.schedule.kinds import Every
from jobs.services import JobDefinition, create_job

pytestmark = pytest.mark.django_db

ESTIMATE_NOTE = "is PostgreSQL's estimate"


@pytest.fixture
def runs() -> list[JobRun]:
    job = create_job(
        JobDefinition(name="big", task="tests.record", schedule=Every(60), kwargs={"log": "/x"}),
        actor=Actor.code("tests"),
    )
    now = timezone.now()
    made = JobRun.objects.bulk_create(
        JobRun(job=job, scheduled_for=now, trigger=Trigger.MANUAL, node=f"node-{n % 3}",
               status=RunStatus.SUCCEEDED if n % 2 else RunStatus.FAILED)
        for n in range(30)
    )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_jobrun")
    return made


def _run_list(admin_client, query: str = "") -> tuple[str, list[str]]:
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(f"/admin/jobs/jobrun/{query}")
    assert response.status_code == 200
    return response.content.decode(), [q["sql"] for q in queries.captured_queries]


def test_a_large_unfiltered_list_counts_by_estimate_and_says_so(
    admin_client, runs: list[JobRun], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(large_tables, "ESTIMATE_ABOVE", 10)  # 30 runs count as a large table
    page, queries = _run_list(admin_client)
    assert ESTIMATE_NOTE in page
    assert not [q for q in queries if "COUNT(*)" in q and "jobs_jobrun" in q]
    assert "30 job runs" in page  # ANALYZE's estimate of this table is exact


def test_a_filtered_or_small_list_counts_exactly(
    admin_client, runs: list[JobRun], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(large_tables, "ESTIMATE_ABOVE", 10)
    page, _ = _run_list(admin_client, "?status__exact=failed")
    assert ESTIMATE_NOTE not in page and "15 job runs" in page
    monkeypatch.setattr(large_tables, "ESTIMATE_ABOVE", 100_000)
    page, _ = _run_list(admin_client)
    assert ESTIMATE_NOTE not in page and "30 job runs" in page


def test_the_node_filter_lists_the_node_table_without_reading_the_runs(
    admin_client, runs: list[JobRun]
) -> None:
    now = timezone.now()
    Node.objects.create(name="node-1", host="h", pid=1, started_at=now, last_heartbeat=now)
    page, queries = _run_list(admin_client)
    assert not [q for q in queries if "DISTINCT" in q and "jobs_jobrun" in q]
    assert "?node=node-1" in page
    page, _ = _run_list(admin_client, "?node=node-1")
    assert "10 job runs" in page
