"""The names people type and read (jobs, blackout windows, API tokens) hold no control character
and no space at either end, in the database too (jobs.values.names, migration 0032): a row written
around the services is refused by a CHECK constraint naming the rule, and the rows that broke the
rules before it are renamed, not lost."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django_celery_beat.models import PeriodicTask

from jobs.audit import Actor
from jobs.models import AuditEntry, Blackout, Job
from jobs.values import names
from jobs.values.names import job_name_for
from jobs.web import tokens
from tests.support.job_factory import HOURLY, new_job
from tests.support.migrations import migrated_back_to

UNPRINTABLE = [" padded", "padded ", "\u3000", "", "line\nbreak", "nul-free\x1b[2J"]
BEFORE = ("jobs", "0031_take_lease_function")


@pytest.mark.django_db
@pytest.mark.parametrize("name", [*UNPRINTABLE, "reports/nightly"])
def test_a_job_row_written_around_the_services_with_such_a_name_is_refused(name: str) -> None:
    job = new_job("nightly", "tests.record", HOURLY, kwargs={"log": "/dev/null"})
    with (
        pytest.raises(IntegrityError, match="job_name_printable"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("UPDATE jobs_job SET name = %s WHERE id = %s", [name, job.pk])
    assert Job.objects.get(pk=job.pk).name == "nightly"


@pytest.mark.django_db
@pytest.mark.parametrize("name", UNPRINTABLE)
def test_window_and_token_rows_with_such_a_name_are_refused(name: str) -> None:
    window = Blackout.objects.create(
        name="freeze",
        starts_at=datetime(2026, 1, 1, tzinfo=UTC),
        ends_at=datetime(2026, 1, 2, tzinfo=UTC),
    )
    token, _secret = tokens.create("ci", actor=Actor.code("test"))
    for table, constraint, pk in [
        ("jobs_blackout", "blackout_name_printable", window.pk),
        ("jobs_apitoken", "token_name_printable", token.pk),
    ]:
        with (
            pytest.raises(IntegrityError, match=constraint),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(f"UPDATE {table} SET name = %s WHERE id = %s", [name, pk])
    assert Blackout.objects.get().name == "freeze"


@pytest.fixture
def at_0031(transactional_db: None) -> Iterator[MigrationExecutor]:
    """The database as migration 0031 left it; migrated forward again afterwards."""
    with migrated_back_to(BEFORE) as executor:
        yield executor


def test_migration_0032_renames_the_rows_that_break_the_rules_and_keeps_them(
    at_0031: MigrationExecutor,
) -> None:
    apps = at_0031.loader.project_state([BEFORE]).apps
    OldJob = apps.get_model("jobs", "Job")
    OldPeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    OldInterval = apps.get_model("django_celery_beat", "IntervalSchedule")
    OldBlackout = apps.get_model("jobs", "Blackout")
    every = OldInterval.objects.create(every=1, period="hours")
    entry = OldPeriodicTask.objects.create(
        name="job: report", task="tests.record", interval=every, kwargs='{"job": " report"}'
    )
    OldJob.objects.create(name=" report", task="tests.record", periodic_task=entry)
    OldJob.objects.create(name="report\n", task="tests.record", kind="continuous")
    OldJob.objects.create(name="fine", task="tests.record", kind="continuous")
    OldBlackout.objects.create(
        name="freeze ", starts_at="2026-01-01T00:00Z", ends_at="2026-01-02T00:00Z"
    )

    at_0031.loader.build_graph()
    # On to the latest: the current models read the rows (0035 keeps these names as they are).
    at_0031.migrate(at_0031.loader.graph.leaf_nodes())

    names = set(Job.objects.values_list("name", flat=True))
    assert names == {"\u2420report", "report\u2420", "fine"}
    renamed = Job.objects.select_related("periodic_task").get(name="\u2420report")
    assert renamed.periodic_task is not None
    assert renamed.periodic_task.name == "job:\u2420report"
    assert renamed.periodic_task.kwargs == '{"job": "\\u2420report"}'
    assert PeriodicTask.objects.filter(pk=entry.pk).exists()
    assert set(Blackout.objects.values_list("name", flat=True)) == {"freeze\u2420"}
    audit = AuditEntry.objects.filter(actor="code:migration 0032").order_by("id")
    assert [(a.before, a.after) for a in audit] == [
        ({"name": " report"}, {"name": "\u2420report"}),
        ({"name": "report\n"}, {"name": "report\u2420"}),
    ]
    # The names are the ones Celery's entry keys would get (jobs.values.names.job_name_for).
    assert job_name_for(" report") == "\u2420report"
    assert job_name_for("report\n") == "report\u2420"


@pytest.mark.django_db
def test_postgresql_reads_the_rules_as_python_does() -> None:
    # The CHECK constraints and validators are one text each (jobs.values.names): the same verdicts.
    samples = [chr(c) for c in range(1, 0x3001) if chr(c).isspace() or chr(c).isprintable()]
    samples += [f"{c}x" for c in samples] + [f"x{c}" for c in samples] + ["", "x y"]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s ~ %s, s ~ %s FROM unnest(%s::text[]) WITH ORDINALITY AS t(s, i) ORDER BY i",
            [names.PADDED_OR_BLANK, names.HOLDS_CONTROL_CHARACTER, samples],
        )
        in_postgresql = cursor.fetchall()
    in_python = [(names.is_padded_or_blank(s), names.has_control_character(s)) for s in samples]
    assert in_postgresql == in_python
