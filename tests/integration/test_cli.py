"""``manage.py jobs <verb>`` against real PostgreSQL: what it creates, what it prints, and the
one-line errors with their exit status (2 usage/validation, 1 not found)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone
from django.utils.html import escape

from jobs.cli import LEASE_FIELDS, NODE_FIELDS
from jobs.forms import JobForm
from jobs.guard import lease
from jobs.models import ApiToken, AuditEntry, Blackout, Job, JobRun, Node, RunStatus, Trigger
from jobs.registry import POLICY_FIELDS
from jobs.values.serializers import RUN_FIELDS
from tests.support.cli_jobs import add, jobs, jobs_error, jobs_json

MANAGE_PY = Path(__file__).resolve().parents[2] / "manage.py"

# A job's record (jobs.values.serializers.job_fields): every registry policy and the fields around.
JOB_KEYS = {
    *("name", "task", "kind", "enabled", "schedule", "schedule_error"),
    *("paused_by", "pause_reason", "paused_until"),  # who paused it, why, until when
    *POLICY_FIELDS,
    *("args", "kwargs", "alerts_muted_until"),
    *("headers", "expires_at", "one_off"),  # what an adopted django-celery-beat row carries
    *("after", "before"),  # its dependencies
}
# What `jobs show` adds, as the admin's job page shows it.
SHOW_KEYS = {"next_slot", "last_run", "lease"}
# The records every edge shows, as the product declares them.
RUN_KEYS = set(RUN_FIELDS)
LEASE_KEYS = set(LEASE_FIELDS)
NODE_KEYS = set(NODE_FIELDS)


# --- errors: one line naming the flag, exit status 2 --------------------------------------

BAD_ADD_INPUT = [
    pytest.param(
        ["--cron", "61 * * * *"],
        "jobs add: error: --cron: '61 * * * *' is not a valid cron expression",
        id="bad-cron",
    ),
    pytest.param(
        ["--cron", "* * *"],
        "jobs add: error: --cron: '* * *' is not a cron expression: give five fields",
        id="cron-with-three-fields",
    ),
    pytest.param(
        ["--every", "-5s"],
        "jobs add: error: --every: '-5s': the interval must be positive",
        id="negative-interval",
    ),
    pytest.param(
        ["--every", "0s"],
        "jobs add: error: --every: '0s': the interval must be positive",
        id="zero-interval",
    ),
    pytest.param(
        ["--every", "soon"],
        "jobs add: error: --every: 'soon' is not a duration",
        id="interval-not-a-duration",
    ),
    pytest.param(
        ["--every", "10s", "--args", "[1,"],
        "jobs add: error: --args: '[1,': not valid JSON",
        id="malformed-json-args",
    ),
    pytest.param(
        ["--every", "10s", "--args", '{"city": "Lyon"}'],
        "jobs add: error: --args: Positional arguments must be a JSON list",
        id="args-not-a-list",
    ),
    pytest.param(
        ["--every", "10s", "--kwargs", '{"town": "Lyon"}'],
        "jobs add: error: --kwargs: tests.cli_example cannot take them",
        id="kwargs-the-function-does-not-take",
    ),
    pytest.param(
        ["--cron", "0 * * * *", "--tz", "Mars/Olympus"],
        "jobs add: error: --tz: 'Mars/Olympus' is not a known time zone",
        id="bad-tz",
    ),
    pytest.param(
        ["--every", "10s", "--tz", "Europe/Paris"],
        "jobs add: error: --tz: Only applies to a cron schedule.",
        id="tz-without-cron",
    ),
    pytest.param(
        ["--every", "10s", "--cron", "0 * * * *"],
        "jobs add: error: --cron: not allowed with argument --every",
        id="two-schedules",
    ),
    pytest.param(
        [],
        "jobs add: error: one of the arguments --every --cron --at --continuous --triggered is "
        "required",
        id="no-schedule",
    ),
    pytest.param(
        ["--at", "tomorrow"],
        "jobs add: error: --at: 'tomorrow' is not an ISO 8601 time",
        id="bad-instant",
    ),
    pytest.param(
        ["--every", "10s", "--overlap", "sometimes"],
        "jobs add: error: --overlap: invalid choice: 'sometimes'",
        id="unknown-policy-value",
    ),
    pytest.param(
        ["--every", "10s", "--catch-up", "all"],
        "jobs add: error: --catch-up: invalid choice: 'all'",
        id="unknown-catch-up",
    ),
    pytest.param(
        ["--every", "10s", "--start-deadline", "-1m"],
        "jobs add: error: --start-deadline: '-1m': the duration must be positive",
        id="negative-duration",
    ),
    pytest.param(
        ["--every", "10s", "--lease-ttl", "1500ms"],
        "jobs add: error: --lease-ttl: '1500ms': the duration must be a whole number of seconds",
        id="fractional-duration",
    ),
    pytest.param(
        ["--every", "1500ms"],
        "jobs add: error: --every: '1500ms': the interval must be a whole number of seconds",
        id="fractional-interval",
    ),
    pytest.param(
        ["--every", "10s", "--retry-backoff", "600w"],
        "jobs add: error: --retry-backoff: '600w' is too long: at most 3650 days",
        id="duration-too-long",
    ),
    pytest.param(
        ["--every", "10s", "--lease-ttl", "2s"],
        "jobs add: error: --lease-ttl: Ensure this value is greater than or equal to 3.",
        id="lease-ttl-below-the-model-minimum",
    ),
    pytest.param(
        ["--every", "10s", "--priority", "12"],
        "jobs add: error: --priority: Ensure this value is less than or equal to 9.",
        id="priority-out-of-range",
    ),
    pytest.param(
        ["--every", "10s", "--max-retries", "many"],
        "jobs add: error: --max-retries: invalid int value: 'many'",
        id="max-retries-not-a-number",
    ),
    pytest.param(
        ["--every", "10s", "--soft-time-limit", "1m", "--time-limit", "30s"],
        "jobs add: error: --soft-time-limit: Must be below the time limit (30 s): the job is "
        "asked to finish before it is killed.",
        id="soft-limit-above-hard",
    ),
    # Hostile values (issue 10): each one line naming its flag, never a traceback.
    pytest.param(
        ["--cron", "0 0 31 2 *"],
        "jobs add: error: --cron: '0 0 31 2 *' never fires: no date in the next 5 years",
        id="cron-never-fires",
    ),
    pytest.param(
        ["--cron", "0 0 30 2 *", "--tz", "Europe/Paris"],
        "jobs add: error: --cron: '0 0 30 2 *' never fires",
        id="cron-never-fires-in-a-zone",
    ),
    pytest.param(
        ["--cron", "0 0 31 2 mon"],
        "jobs add: error: --cron: '0 0 31 2 mon' never fires",
        id="cron-never-fires-both-days-must-match",
    ),
    pytest.param(
        ["--cron", "0 0 L * *"],
        "jobs add: error: --cron: '0 0 L * *' is not a valid cron expression: the day of month "
        "field 'L' is not valid in Celery's crontab",
        id="cron-croniter-only-syntax",
    ),
    pytest.param(
        ["--cron", "0 0 * * " + ",".join(["1"] * 200)],
        "jobs add: error: --cron: the cron expression is too long: at most 200 characters",
        id="cron-too-long",
    ),
    pytest.param(
        ["--cron", "0 * * * *", "--tz", "America"],
        "jobs add: error: --tz: 'America' is not a known time zone",
        id="tz-a-folder",
    ),
    pytest.param(
        ["--cron", "0 * * * *", "--tz", "Z" * 5000],
        "jobs add: error: --tz: the time zone name is too long: at most 63 characters",
        id="tz-5000-characters",
    ),
    pytest.param(
        ["--at", "0001-01-01T00:00:00+14:00"],
        "jobs add: error: --at: 0001-01-01T00:00:00+14:00 is out of range in UTC",
        id="at-out-of-range",
    ),
    # Bounded to what makes sense (issue 29): each was accepted.
    pytest.param(
        ["--at", "1900-01-01T00:00Z"],
        "jobs add: error: --at: 1900-01-01T00:00:00+00:00 is past, by more than the start "
        "deadline (300 s): its run could only be recorded missed. Give a later time, or run the "
        "job now.",
        id="at-in-the-past",
    ),
    pytest.param(
        ["--cron", "0 * * * *", "--tz", "localtime"],
        "jobs add: error: --tz: 'localtime' is not a known time zone",
        id="tz-localtime",
    ),
    pytest.param(
        ["--cron", "0 * * * *", "--tz", "posixrules"],
        "jobs add: error: --tz: 'posixrules' is not a known time zone",
        id="tz-posixrules",
    ),
    pytest.param(
        ["--cron", "0 * * * *", "--tz", "posix/Europe/Paris"],
        "jobs add: error: --tz: 'posix/Europe/Paris' is not a known time zone",
        id="tz-posix-folder",
    ),
    pytest.param(
        ["--every", "10s", "--lease-ttl", "2d"],
        "jobs add: error: --lease-ttl: Ensure this value is less than or equal to 86400.",
        id="lease-ttl-over-a-day",
    ),
    pytest.param(
        ["--every", "10s", "--kwargs", '{"city": "\\u0000"}'],
        'jobs add: error: --kwargs: \'{"city": "\\\\u0000"}\': a string cannot contain the NUL',
        id="kwargs-nul",
    ),
    pytest.param(
        ["--every", "10s", "--args", "[" + "7" * 5000 + "]"],
        "jobs add: error: --args: '[777",
        id="args-huge-integer",
    ),
    pytest.param(
        ["--every", "10s", "--args", "[" * 50_000 + "]" * 50_000],
        "jobs add: error: --args: '[[[",
        id="args-deeply-nested",
    ),
    pytest.param(
        ["--every", "10s", "--kwargs", '{"city": Infinity}'],
        "jobs add: error: --kwargs: '{\"city\": Infinity}': inf is not a number JSON can store",
        id="kwargs-infinite",
    ),
    pytest.param(
        [
            "--every",
            "1m",
            "--task",
            "tests.by_city",
            "--kwargs",
            '{"log": "-", "city": "%s"}' % ("x" * 300),
        ],
        "jobs add: error: --kwargs: The lock key of tests.by_city is 305 characters long",
        id="lock-key-too-long",
    ),
    pytest.param(
        ["--every", "10s", "--queue", "re\x00ports"],
        r"jobs add: error: --queue: 're\x00ports' cannot contain the NUL character (\u0000)",
        id="queue-nul",
    ),
    # Names that are printed or routed hold no control character (issue 29: a queue "a\nb" split
    # `jobs list` and its runs were never consumed).
    pytest.param(
        ["--every", "10s", "--queue", "re\nports"],
        "jobs add: error: --queue: A queue name cannot contain a line break or another control "
        "character.",
        id="queue-line-break",
    ),
    pytest.param(
        ["--every", "10s", "--queue", "re\u2028ports"],
        "jobs add: error: --queue: A queue name cannot contain a line break",
        id="queue-line-separator",
    ),
    # A queue that reads like another (issue 41's follow-up): its runs go to a queue no worker
    # consumes while `jobs list` shows the one they do.
    pytest.param(
        ["--every", "10s", "--queue", "re\u200bports"],
        "jobs add: error: --queue: A queue name cannot contain an invisible or format character",
        id="queue-zero-width-space",
    ),
    pytest.param(
        ["--every", "1m", "--task", "tests.by_city", "--kwargs", '{"log": "-", "city": "a\\nb"}'],
        "jobs add: error: --kwargs: The lock key of tests.by_city contains a line break or another "
        "control character with these arguments.",
        id="lock-key-line-break",
    ),
    pytest.param(
        ["--every", "10s", "--colour", "red"],
        "jobs add: error: unrecognized arguments: --colour red",
        id="unknown-flag",
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("flags", "message"), BAD_ADD_INPUT)
def test_bad_add_input_is_one_line_naming_the_flag_with_status_2(
    flags: list[str], message: str
) -> None:
    error = jobs_error("add", "x", "--task", "tests.cli_example", *flags)
    assert str(error).startswith(message)
    assert "\n" not in str(error)
    assert error.returncode == 2
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["a\nb", "a\rb", "a\u2028b", "a\u2029b", "\x1b[31mred", "a\x85b"])
def test_a_window_or_token_name_with_a_control_character_is_refused_naming_it(name: str) -> None:
    window = jobs_error(
        "blackout", "add", name, "--from", "2030-01-01T00:00Z", "--until", "2030-01-02T00:00Z"
    )
    with pytest.raises(CommandError) as token:
        call_command("apitoken", "create", name, stdout=io.StringIO())

    assert str(window) == (
        "jobs blackout add: error: NAME: A blackout window's name cannot contain a line break or "
        "another control character."
    )
    assert (window.returncode, token.value.returncode) == (2, 2)
    assert str(token.value) == (
        "apitoken create: NAME: A token name cannot contain a line break or another control "
        "character."
    )
    assert not Blackout.objects.exists() and not ApiToken.objects.exists()


@pytest.mark.django_db
def test_add_reports_every_rejected_field_on_the_same_line() -> None:
    error = jobs_error(
        "add", "x", "--task", "tests.cli_example", "--every", "1s",
        "--lease-ttl", "1s", "--priority", "10",
    )  # fmt: skip
    assert str(error) == (
        "jobs add: error: --lease-ttl: Ensure this value is greater than or equal to 3.; "
        "--priority: Ensure this value is less than or equal to 9."
    )


@pytest.mark.django_db
def test_add_an_unknown_task() -> None:
    error = jobs_error("add", "x", "--task", "nope.missing", "--every", "10s")
    assert str(error).startswith(
        "jobs add: error: --task: 'nope.missing' is not a registered job function or Celery task "
        "(known: "
    )
    assert "tests.cli_example" in str(error)
    assert error.returncode == 2


@pytest.mark.django_db
def test_add_without_task() -> None:
    error = jobs_error("add", "x", "--every", "10s")
    assert str(error) == "jobs add: error: the following arguments are required: --task"
    assert error.returncode == 2


@pytest.mark.django_db
def test_add_a_duplicate_name() -> None:
    add("report", "--every", "10s")
    error = jobs_error("add", "report", "--task", "tests.cli_example", "--cron", "0 * * * *")
    assert str(error) == "jobs add: error: NAME: Job with this Name already exists."
    assert error.returncode == 2
    job = Job.objects.get(name="report")
    assert job.periodic_task is not None and job.periodic_task.interval is not None


@pytest.mark.django_db
def test_add_a_name_with_a_slash() -> None:
    error = jobs_error("add", "reports/nightly", "--task", "tests.cli_example", "--every", "10s")
    assert str(error) == (
        "jobs add: error: NAME: A job name cannot contain '/': it is part of the API's URLs "
        "(/api/jobs/<name>)."
    )
    assert error.returncode == 2
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_add_an_empty_name() -> None:
    error = jobs_error("add", "", "--task", "tests.cli_example", "--every", "10s")
    assert str(error) == "jobs add: error: NAME: This field cannot be blank."


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "jobs: error: give a verb: add, list, show, run, pause, resume, remove, runs,"),
        (["frobnicate"], "jobs: error: VERB: invalid choice: 'frobnicate'"),
        (["list", "--limit", "3"], "jobs list: error: unrecognized arguments: --limit 3"),
        (["runs", "--limit", "0"], "jobs runs: error: --limit: '0': must be at least 1"),
        (["runs", "--status", "done"], "jobs runs: error: --status: invalid choice: 'done'"),
        (["show"], "jobs show: error: the following arguments are required: NAME"),
    ],
)
def test_usage_errors_of_other_verbs(args: list[str], message: str) -> None:
    error = jobs_error(*args)
    assert str(error).startswith(message)
    assert error.returncode == 2


@pytest.mark.django_db
@pytest.mark.parametrize("verb", ["show", "run", "pause", "resume", "remove", "runs"])
def test_an_unknown_job_name_is_status_1(verb: str) -> None:
    error = jobs_error(verb, "ghost")
    assert str(error) == f"jobs {verb}: error: no job named 'ghost'"
    assert error.returncode == 1


# What no name or text can hold (jobs.values.text): a NUL, and the lone surrogate that Python makes
# of an argument's invalid UTF-8 byte (here 0xFF, as a shell passes $'\xff').
NOT_UTF8 = "\udcff"
WINDOW = ["--from", "2030-01-01T00:00Z", "--until", "2030-01-02T00:00Z"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["show", NOT_UTF8], "NAME"),
        (["show", "gh\x00ost"], "NAME"),
        (["run", NOT_UTF8], "NAME"),
        (["add", NOT_UTF8, "--task", "tests.cli_example", "--every", "10s"], "NAME"),
        (["add", "x", "--task", "tests.cli_example", "--every", "10s", "--queue", NOT_UTF8],
         "--queue"),
        (["add", "x", "--task", "tests.cli_example", "--every", "10s", f"--queue={NOT_UTF8}"],
         "--queue"),
        (["runs", NOT_UTF8], "JOB"),
        (["runs", "--status", NOT_UTF8], "--status"),
        (["blackout", "add", NOT_UTF8, *WINDOW], "NAME"),
        (["blackout", "add", "w", *WINDOW, "--description", NOT_UTF8], "--description"),
        (["blackout", "add", "w", *WINDOW, "--job", NOT_UTF8], "--job"),
    ],
)  # fmt: skip
def test_text_the_database_cannot_hold_is_one_line_naming_the_argument(
    args: list[str], named: str
) -> None:
    error = jobs_error(*args)

    verb = " ".join(args[:2]) if args[0] == "blackout" else args[0]
    assert str(error).startswith(f"jobs {verb}: error: {named}: "), str(error)
    assert "\n" not in str(error)
    str(error).encode()  # printable on a UTF-8 terminal
    assert error.returncode == 2
    assert not Job.objects.exists() and not Blackout.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("kwargs", ['{"seconds": "\\ud800"}', '{"\\udfff": 1}'])
def test_run_kwargs_with_a_lone_surrogate_are_one_line_naming_the_flag(kwargs: str) -> None:
    add("report", "--every", "10s")

    error = jobs_error("run", "report", "--kwargs", kwargs)

    assert str(error).startswith("jobs run: error: --kwargs: "), str(error)
    assert "lone surrogate" in str(error)
    assert error.returncode == 2
    assert not JobRun.objects.exists()


# --- errors from a real shell: one line on stderr, no traceback ---------------------------


def _manage(*args: str) -> subprocess.CompletedProcess[str]:
    # The child reaches the non-test database of DATABASE_URL: only cases that fail while
    # parsing, before any query, belong here.
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings"}
    return subprocess.run(
        [sys.executable, str(MANAGE_PY), "jobs", *args],
        env=env,
        cwd=MANAGE_PY.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [
        ["add", "x", "--every", "-5s"],
        ["add", "x", "--task", "t", "--every", "10s", "--cron", "0 * * * *"],
        ["add", "x", "--task", "t", "--cron", "0 * * * *", "--tz", "Mars/Olympus"],
        ["add", "x", "--task", "t", "--every", "10s", "--overlap", "sometimes"],
        ["frobnicate"],
        ["add", "x", "--task", "t", "--cron", "0 * * * *", "--tz", "America"],
        ["add", "x", "--task", "t", "--every", "1m", "--kwargs", '{"a": "\\u0000"}'],
        ["add", "x", "--task", "t", "--cron", "0 0 * * " + ",".join(["1"] * 200)],
        ["add", "x", "--task", "t", "--at", "0001-01-01T00:00:00+14:00"],
        ["add", "x", "--task", "t", "--cron", "0 0 31 2 *"],
    ],
    ids=[
        "negative-interval",
        "two-schedules",
        "bad-tz",
        "unknown-policy-value",
        "unknown-verb",
        "tz-a-folder",
        "kwargs-nul",
        "cron-too-long",
        "at-out-of-range",
        "cron-never-fires",
    ],
)
def test_a_shell_gets_the_same_single_line_and_status_2(args: list[str]) -> None:
    result = _manage(*args)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.rstrip("\n") == str(jobs_error(*args))


@pytest.mark.parametrize(
    "args",
    [
        ["show", NOT_UTF8],
        ["add", NOT_UTF8, "--task", "t", "--every", "10s"],
        ["add", "x", "--task", "t", "--every", "10s", "--queue", NOT_UTF8],
        ["runs", NOT_UTF8],
        ["blackout", "add", NOT_UTF8, *WINDOW],
        ["add", "x", "--task", "t", "--every", NOT_UTF8],
        [NOT_UTF8],
    ],
    ids=["show", "add", "queue", "runs", "blackout-add", "every", "verb"],
)
def test_a_shell_passing_invalid_utf8_gets_one_line_and_status_2(args: list[str]) -> None:
    # subprocess passes each "\udcff" to the child as the byte 0xFF (os.fsencode).
    result = _manage(*args)

    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "UnicodeEncodeError" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "\\udcff" in result.stderr, result.stderr


def test_a_shell_gets_the_example_line_of_the_issue() -> None:
    result = _manage("add", "x", "--every", "-5s")
    assert result.stderr == "jobs add: error: --every: '-5s': the interval must be positive\n"


def test_help_documents_the_exit_status() -> None:
    result = _manage("--help")
    assert result.returncode == 0
    assert "exit status:" in result.stdout and "2  usage or validation error" in result.stdout


# --- listings: --json contract keys and human tables --------------------------------------


@pytest.mark.django_db
def test_list_json_has_one_object_per_job_with_the_contract_keys() -> None:
    add("a-report", "--every", "10s", "--kwargs", '{"city": "Lyon"}')
    add("b-nightly", "--cron", "30 2 * * *", "--tz", "Europe/Paris", "--paused")
    add("c-poller", "--continuous")
    records = jobs_json("list")
    assert isinstance(records, list)
    assert [set(record) for record in records] == [JOB_KEYS] * 3
    first, second, third = records
    assert first["name"] == "a-report" and first["schedule"] == "every 10 seconds"
    assert first["kwargs"] == {"city": "Lyon"} and first["args"] == []
    assert first["start_deadline"] == 300 and first["priority"] is None
    assert second["enabled"] is False and second["schedule"] == "At 02:30 AM (Europe/Paris)"
    assert third["kind"] == "continuous" and third["schedule"] == "continuous"


@pytest.mark.django_db
def test_list_prints_an_aligned_table() -> None:
    add("report", "--every", "10s")
    add("nightly-long-name", "--cron", "30 2 * * *", "--paused")
    lines = jobs("list").splitlines()
    assert lines[0].split() == ["NAME", "TASK", "SCHEDULE", "STATE", "OVERLAP", "QUEUE"]
    assert lines[1].startswith("nightly-long-name  tests.cli_example  At 02:30 AM (UTC)")
    assert lines[2].startswith("report             tests.cli_example  every 10 seconds ")
    assert "paused" in lines[1] and "enabled" in lines[2]
    # Aligned: every column starts at the same offset on every line.
    assert {line.index("tests.cli_example") for line in lines[1:]} == {lines[0].index("TASK")}


@pytest.mark.django_db
def test_empty_listings_say_so() -> None:
    assert jobs("list") == "no jobs\n"
    assert jobs("runs") == "no runs\n"
    assert jobs("nodes") == "no nodes\n"
    assert jobs("leases") == "no leases\n"
    assert jobs_json("list") == []


@pytest.mark.django_db
def test_show_json_is_one_object_and_text_is_one_field_per_line() -> None:
    add("report", "--every", "90s", "--args", '["Lyon"]', "--queue", "reports")
    record = jobs_json("show", "report")
    assert isinstance(record, dict) and set(record) == JOB_KEYS | SHOW_KEYS
    assert record["schedule"] == "every 90 seconds" and record["args"] == ["Lyon"]
    lines = jobs("show", "report").splitlines()
    assert len(lines) == len(JOB_KEYS | SHOW_KEYS)
    assert "schedule            every 90 seconds" in lines
    assert 'args                ["Lyon"]' in lines
    assert "priority            -" in lines
    assert "alerts_muted_until  -" in lines


@pytest.mark.django_db
def test_show_has_the_next_slot_last_run_and_lease_holder_as_the_admin_page() -> None:
    # Issue 29: the admin's job page has them, `jobs show` had not.
    report = add("report", "--every", "90s")
    first = jobs_json("show", "report")
    assert (first["last_run"], first["lease"]) == (None, None)
    assert "last_run            -" in jobs("show", "report").splitlines()
    slot = timezone.now().replace(microsecond=0) - timedelta(minutes=1)
    JobRun.objects.create(job=report, scheduled_for=slot - timedelta(minutes=1))
    last = JobRun.objects.create(job=report, scheduled_for=slot, status=RunStatus.FAILED)
    held = lease.acquire(report.lock_key, "node-a@host:42:run-7", ttl=60)
    assert held is not None

    record = jobs_json("show", "report")
    lines = jobs("show", "report").splitlines()

    next_slot = datetime.fromisoformat(record["next_slot"])
    assert timezone.now() < next_slot <= timezone.now() + timedelta(seconds=90)
    assert f"next_slot           {next_slot.isoformat(timespec='seconds')}" in lines
    assert record["last_run"] == {
        "id": last.pk, "status": "failed", "scheduled_for": slot.isoformat()
    }  # fmt: skip
    assert f"last_run            #{last.pk} failed, slot {slot.isoformat()}" in lines  # seconds
    assert record["lease"] == {
        "holder": "node-a@host:42:run-7", "token": held.token,
        "expires_at": held.expires_at.isoformat(),
    }  # fmt: skip
    expires = held.expires_at.isoformat(timespec="seconds")
    assert f"lease               node-a@host:42:run-7 #{held.token}, expires {expires}" in lines
    # Paused: no next slot, and the text says why, as the admin page does.
    jobs("pause", "report")
    assert jobs_json("show", "report")["next_slot"] is None
    assert "next_slot           none: paused" in jobs("show", "report").splitlines()


@pytest.mark.django_db
def test_runs_json_filters_by_job_and_status_and_limits() -> None:
    report, other = add("report", "--every", "10s"), add("other", "--every", "10s")
    now = timezone.now()
    for minutes, status in ((3, RunStatus.SUCCEEDED), (2, RunStatus.FAILED), (1, "succeeded")):
        JobRun.objects.create(
            job=report,
            scheduled_for=now - timedelta(minutes=minutes),
            status=status,
            trigger=Trigger.SCHEDULED,
            started_at=now - timedelta(minutes=minutes),
            finished_at=now - timedelta(minutes=minutes) + timedelta(seconds=2),
            node="node-a@host",
            pid=42,
            fencing_token=minutes,
            error="boom\ntraceback" if status == RunStatus.FAILED else "",
        )
    JobRun.objects.create(job=other, scheduled_for=now, trigger=Trigger.MANUAL)

    records = jobs_json("runs")
    assert isinstance(records, list) and len(records) == 4
    assert all(set(record) == RUN_KEYS for record in records)
    assert [record["job"] for record in records] == ["other", "report", "report", "report"]

    succeeded = jobs_json("runs", "report", "--status", "succeeded")
    assert isinstance(succeeded, list)
    assert [record["fencing_token"] for record in succeeded] == [1, 3]  # newest slot first
    newest = succeeded[0]
    assert datetime.fromisoformat(newest["scheduled_for"]) == now - timedelta(minutes=1)
    assert datetime.fromisoformat(newest["finished_at"]) == now + timedelta(seconds=-58)
    assert (newest["node"], newest["pid"], newest["attempt"]) == ("node-a@host", 42, 1)
    assert newest["trigger"] == "scheduled" and newest["status"] == "succeeded"

    assert len(jobs_json("runs", "--limit", "2")) == 2

    table = jobs("runs", "report", "--status", "failed").splitlines()
    assert table[0].split()[:4] == ["ID", "JOB", "SLOT", "STATUS"]
    assert len(table) == 2 and "failed" in table[1] and "2.0s" in table[1]
    assert table[1].endswith("boom")  # the error's first line only


@pytest.mark.django_db
def test_nodes_json_has_the_contract_keys() -> None:
    now = timezone.now()
    Node.objects.create(
        name="node-a@host",
        host="host",
        pid=1234,
        queues=["default", "reports"],
        concurrency=4,
        version="0.1.0",
        started_at=now - timedelta(hours=1),
        last_heartbeat=now,
    )
    records = jobs_json("nodes")
    assert isinstance(records, list) and len(records) == 1
    (record,) = records
    assert set(record) == NODE_KEYS
    assert record["queues"] == ["default", "reports"] and record["state"] == "alive"
    assert datetime.fromisoformat(record["last_heartbeat"]) == now
    lines = jobs("nodes").splitlines()
    assert lines[0].startswith("NAME") and "LAST HEARTBEAT" in lines[0]
    assert "default,reports" in lines[1]


@pytest.mark.django_db
def test_leases_json_has_the_contract_keys_and_the_table_says_which_are_live() -> None:
    held = lease.acquire("job:report", "node-a@host", ttl=30)
    assert held is not None
    lapsed = lease.acquire("job:old", "node-b@host", ttl=30)
    assert lapsed is not None and lease.release(lapsed)
    records = jobs_json("leases")
    assert isinstance(records, list)
    assert [set(record) for record in records] == [LEASE_KEYS] * 2
    by_key = {record["key"]: record for record in records}
    assert by_key["job:report"]["token"] == held.token
    assert by_key["job:report"]["holder"] == "node-a@host"
    assert datetime.fromisoformat(by_key["job:report"]["expires_at"]) == held.expires_at
    lines = jobs("leases").splitlines()
    assert lines[0].split() == ["KEY", "HOLDER", "TOKEN", "ACQUIRED", "EXPIRES", "LIVE"]
    assert lines[1].startswith("job:old") and lines[1].endswith("no")
    assert lines[2].startswith("job:report") and lines[2].endswith("yes")


def test_tasks_lists_registered_functions_with_summary_and_declared_schedule() -> None:
    records = jobs_json("tasks")
    assert isinstance(records, list)
    assert all(set(record) == {"name", "kind", "summary", "schedule"} for record in records)
    by_name = {record["name"]: record for record in records}
    assert by_name["tests.cli_example"] == {
        "name": "tests.cli_example",
        "kind": "job function",
        "summary": "Greets a city, for the CLI tests.",
        "schedule": None,
    }
    line = next(line for line in jobs("tasks").splitlines() if "tests.cli_example" in line)
    assert line.split(None, 4) == [
        "tests.cli_example", "job", "function", "-", "Greets a city, for the CLI tests."
    ]  # fmt: skip


def test_a_task_s_summary_is_its_first_sentence_never_cut_mid_sentence() -> None:
    # The first sentence of a docstring often wraps onto its second line; a very long one is cut
    # at a word's end, with an ellipsis. The same words in `jobs tasks` and the admin's chooser.
    wrapped = (
        "Reconciles the day's invoices with the payment provider's settlement report, then "
        "mails the differences to finance."
    )
    long = (
        "Walks every warehouse of every region and every shelf of every aisle of each of them, "
        "counting the boxes, the pallets…"
    )
    by_name = {record["name"]: record["summary"] for record in jobs_json("tasks")}
    assert by_name["tests.cli_wrapped_summary"] == wrapped
    assert by_name["tests.cli_long_summary"] == long
    lines = jobs("tasks").splitlines()
    assert any(line.endswith(f"function  -         {wrapped}") for line in lines), lines
    # The chooser names the task; its summary is the option's title (jobs.forms.TaskSelect).
    chooser = JobForm()["task"].as_widget()
    assert f'title="{escape(wrapped)}">tests.cli_wrapped_summary<' in chooser
    assert f'title="{escape(long)}">tests.cli_long_summary<' in chooser


@pytest.mark.django_db
@pytest.mark.parametrize("name", [" ", " report", "report ", "report\u3000", ""])
def test_add_a_blank_or_padded_name(name: str) -> None:
    # It would print like another job's name, or like none, in every listing.
    error = jobs_error("add", name, "--task", "tests.cli_example", "--every", "10s")
    assert str(error) == (
        "jobs add: error: NAME: A job name cannot be blank or begin or end with a space."
    ) or "NAME: This field cannot be blank." in str(error)
    assert error.returncode == 2
    assert not Job.objects.exists()


# --- durations (jobs.alerts.baseline) ---------------------------------------------------------


@pytest.mark.django_db
def test_add_takes_the_duration_settings() -> None:
    job = add(
        "timed", "--every", "1h", "--max-duration", "10m", "--min-duration", "5s",
        "--long-run-factor", "2.5", "--baseline-alerts", "no",
    )  # fmt: skip
    assert (job.max_duration, job.min_duration, job.long_run_factor, job.baseline_alerts) == (
        600,
        5,
        2.5,
        False,
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--long-run-factor", "1"],
            "--long-run-factor: Ensure this value is greater than or equal to 1.1.",
        ),
        (["--long-run-factor", "x"], "--long-run-factor: 'x' is not a number"),
        (["--max-duration", "0"], "--max-duration: '0': the duration must be positive"),
        (
            ["--min-duration", "1m", "--max-duration", "30s"],
            "--min-duration: Must be below the maximum duration (30 s): a run cannot be both "
            "too short and running long.",
        ),
    ],
)
def test_bad_duration_settings_are_one_line_naming_the_flag(flags: list[str], message: str) -> None:
    error = jobs_error("add", "x", "--task", "tests.cli_example", "--every", "1h", *flags)
    assert str(error) == f"jobs add: error: {message}"
    assert error.returncode == 2
    assert not Job.objects.exists()


def _succeeded(job: Job, seconds: float, ago: int) -> None:
    started = timezone.now() - timedelta(seconds=ago)
    JobRun.objects.create(
        job=job, scheduled_for=started, trigger=Trigger.MANUAL, status=RunStatus.SUCCEEDED,
        started_at=started, finished_at=started + timedelta(seconds=seconds),
    )  # fmt: skip


@pytest.mark.django_db
def test_durations_shows_the_baseline_and_changes_the_settings_with_an_audit_entry() -> None:
    job = add("timed", "--every", "1h")
    assert jobs("durations", "timed").splitlines() == [
        "timed: no baseline (fewer than 5 successes)",
        "running long: not judged (no maximum, time limit or baseline)",
        "too short: not judged (no minimum, or too few successes)",
        "max_duration -, long_run_factor -, min_duration -, baseline_alerts yes",
    ]
    for i in range(10):
        _succeeded(job, seconds=2, ago=1000 - i)
    shown = jobs("durations", "timed", "--long-run-factor", "4", "--min-duration", "1s")
    assert shown.splitlines() == [
        "timed: baseline median 2.000 s, p95 2.000 s of its last 10 successes",
        "running long past 8 s: 4 x its baseline (p95 2.0 s of its last 10 successes), at "
        "least 5 s",
        "too short under 1 s: its minimum duration of 1 s",
        "max_duration -, long_run_factor 4.0, min_duration 1, baseline_alerts yes",
    ]
    jobs("durations", "timed", "--min-duration", "none")
    job.refresh_from_db()
    assert (job.long_run_factor, job.min_duration, job.managed_by_code) == (4.0, None, False)
    entries = AuditEntry.objects.filter(job_name="timed", action="edit").order_by("id")
    assert [(e.before, e.after) for e in entries] == [
        (
            {"long_run_factor": None, "min_duration": None},
            {"long_run_factor": 4.0, "min_duration": 1},
        ),
        ({"min_duration": 1}, {"min_duration": None}),
    ]
    error = jobs_error("durations", "timed", "--long-run-factor", "500")
    assert str(error) == (
        "jobs durations: error: --long-run-factor: Ensure this value is less than or equal to "
        "100.0."
    )
