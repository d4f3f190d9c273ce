"""A run's own log end to end in one process: a run executed by the runner keeps what its code
logged (at its level) and printed, redacted, before its outcome is recorded; retention deletes it
with its run; the API and the CLI read it after a cursor, and refuse bad input cleanly."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from jobs.audit import Actor
from jobs.guard.runner import execute_run
from jobs.models import Job, JobRun, RunLogLine, RunStatus
from jobs.upkeep import retention
from jobs.values.redaction import MASK
from jobs.web import tokens
from tests.support.cli_jobs import jobs, jobs_error
from tests.support.job_factory import new_run

pytestmark = pytest.mark.django_db(transaction=True)

SECRET_URL = "postgresql://app:hunter2@db.example.com:5432/app"


def _levels_and_messages(run: JobRun) -> list[tuple[str, str]]:
    return list(RunLogLine.objects.filter(run=run).order_by("seq").values_list("level", "message"))


@pytest.fixture
def talked(make_job: Callable[..., Job]) -> JobRun:
    """A run of tests.talk_every_way (log_level DEBUG) executed here, as a worker would."""
    job = make_job("talker", task="tests.talk_every_way", kwargs={"secret_url": SECRET_URL})
    run = new_run(job)
    execute_run(run.pk, task_id=f"jobrun-{run.pk}", node="n1")
    return JobRun.objects.get(pk=run.pk)


def test_a_run_keeps_what_its_code_logged_and_printed_redacted(talked: JobRun) -> None:
    assert talked.status == RunStatus.SUCCEEDED
    lines = _levels_and_messages(talked)
    assert lines[:5] == [
        ("DEBUG", "a debug line"),  # the job's own level, below the process's INFO
        ("INFO", f"connecting to postgresql://app:{MASK}@db.example.com:5432/app"),
        ("WARNING", "a warning"),
        ("STDOUT", "printed to stdout"),
        ("STDERR", "printed to stderr"),
    ]
    level, exception = lines[5]
    assert level == "ERROR" and exception.startswith("an exception\nTraceback")
    assert lines[6:] == [("STDOUT", "no line break at the end")]
    assert "hunter2" not in json.dumps(lines)


def test_a_job_without_a_level_of_its_own_keeps_info_and_above(
    make_job: Callable[..., Job],
) -> None:
    run = new_run(make_job("counter", task="tests.talk", kwargs={"count": 3}))
    execute_run(run.pk, task_id=f"jobrun-{run.pk}", node="n1")
    assert [message.split(" at ")[0] for _, message in _levels_and_messages(run)] == [
        "line 1",
        "line 2",
        "line 3",
    ]


def test_retention_deletes_the_log_with_its_run(talked: JobRun) -> None:
    JobRun.objects.filter(pk=talked.pk).update(scheduled_for=timezone.now() - timedelta(days=90))
    assert RunLogLine.objects.filter(run=talked).exists()

    result = retention.prune()

    assert result.total == 1
    assert not RunLogLine.objects.filter(run_id=talked.pk).exists()


def test_a_run_deleted_by_plain_sql_takes_its_lines(talked: JobRun) -> None:
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM jobs_jobrun WHERE id = %s", [talked.pk])
    assert not RunLogLine.objects.filter(run_id=talked.pk).exists()


# --- the API ------------------------------------------------------------------------------------


@pytest.fixture
def api() -> Client:
    secret = tokens.create("tests", actor=Actor.code("tests"))[1]
    return Client(headers={"authorization": f"Bearer {secret}"})


def test_the_api_gives_the_lines_after_the_cursor(api: Client, talked: JobRun) -> None:
    first = api.get(f"/api/runs/{talked.pk}/log", {"limit": 2})
    assert first.status_code == 200
    body = first.json()
    assert [line["message"] for line in body["lines"]] == [
        "a debug line",
        body["lines"][1]["message"],
    ]
    assert (body["run"], body["status"], body["cursor"], body["finished"]) == (
        talked.pk,
        "succeeded",
        2,
        False,
    )
    rest = api.get(f"/api/runs/{talked.pk}/log", {"cursor": body["cursor"]}).json()
    assert [line["seq"] for line in rest["lines"]] == [3, 4, 5, 6, 7]
    assert rest["finished"] is True and rest["cursor"] == 7
    assert set(rest["lines"][0]) == {"seq", "at", "level", "message", "cut"}


def test_the_api_refuses_bad_input_naming_it_never_a_500(api: Client, talked: JobRun) -> None:
    for path in ("/api/runs/abc/log", "/api/runs/99999999999999999999/log", "/api/runs/0/log"):
        answer = api.get(path)
        assert answer.status_code == 404, path
        assert answer.json()["fields"] == {"run_id": ["no such run"]}
    unknown = api.get("/api/runs/424242/log")
    assert unknown.status_code == 404 and "424242" in unknown.json()["error"]
    bad = api.get(f"/api/runs/{talked.pk}/log", {"cursor": "x", "limit": "0", "after": "1"})
    assert bad.status_code == 400
    assert set(bad.json()["fields"]) == {"cursor", "limit", "after"}


def test_the_api_needs_credentials(talked: JobRun) -> None:
    assert Client().get(f"/api/runs/{talked.pk}/log").status_code == 401


# --- the CLI ------------------------------------------------------------------------------------


def test_the_cli_prints_each_line_with_its_time_and_level(talked: JobRun) -> None:
    printed = jobs("log", str(talked.pk)).splitlines()
    assert printed[0].endswith(" DEBUG a debug line")
    assert printed[-1].endswith(" STDOUT no line break at the end")
    first = RunLogLine.objects.get(run=talked, seq=1)
    assert printed[0].startswith(first.at.isoformat(timespec="milliseconds"))


def test_the_cli_prints_json_lines(talked: JobRun) -> None:
    records = [json.loads(line) for line in jobs("log", str(talked.pk), "--json").splitlines()]
    assert [record["seq"] for record in records] == [1, 2, 3, 4, 5, 6, 7]
    assert records[2] == {
        "seq": 3,
        "at": records[2]["at"],
        "level": "WARNING",
        "message": "a warning",
        "cut": 0,
    }


def test_follow_on_a_finished_run_prints_everything_and_ends(talked: JobRun) -> None:
    assert jobs("log", str(talked.pk), "--follow") == jobs("log", str(talked.pk))


def test_the_cli_refuses_bad_input_naming_it() -> None:
    error = jobs_error("log", "abc")
    assert str(error).startswith("jobs log: error: RUN_ID: 'abc' is not a run id")
    assert error.returncode == 2
    unknown = jobs_error("log", "424242")
    assert str(unknown) == "jobs log: error: no run with id 424242" and unknown.returncode == 1


# --- the admin ----------------------------------------------------------------------------------


def test_the_runs_page_shows_its_log_and_follows_it_from_the_api(
    admin_client: Client, talked: JobRun
) -> None:
    page = admin_client.get(f"/admin/jobs/jobrun/{talked.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'data-url="/api/runs/{talked.pk}/log"' in html and 'data-cursor="7"' in html
    assert 'data-finished="true"' in html
    assert "DEBUG a debug line" in html and "hunter2" not in html
    assert "fetch(log.dataset.url" in html  # the script that follows a running run
    # The session that shows the page may read the API the script asks.
    follow = admin_client.get(f"/api/runs/{talked.pk}/log", {"cursor": 7})
    assert follow.status_code == 200 and follow.json()["finished"] is True


def test_a_running_runs_page_waits_for_lines(
    admin_client: Client, make_job: Callable[..., Job]
) -> None:
    run = new_run(make_job("quiet"))
    html = admin_client.get(f"/admin/jobs/jobrun/{run.pk}/change/").content.decode()
    assert 'data-finished="false"' in html and "No line yet." in html
