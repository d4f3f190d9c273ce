"""Property-based fuzzing of ``manage.py jobs add``, ``jobs run``, ``jobs blackout add|remove``
and ``apitoken create|revoke`` (hypothesis, in process through ``call_command``): whatever the
flags hold (control characters, NUL, very long values, any code point: lone surrogates are what a
shell's invalid UTF-8 becomes), the command either does its work (and no name it stored holds a
control character) or fails with one line ``... error: ...`` that names
the flag (or NAME) at fault and exit status 2 (1 for a job, window or token that does not
exist); never a traceback (any other exception fails the test)."""

from __future__ import annotations

import io
import itertools

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from hypothesis import given
from hypothesis import strategies as st

from jobs.models import ApiToken, Blackout, Job
from jobs.schedule.kinds import Every
from jobs.values.names import has_control_character
from tests.support.fuzzing import any_text, fuzz_settings
from tests.support.hostile_values import BAD_RECORD_KWARGS, CONTROL, UNENCODABLE
from tests.support.job_factory import new_job

pytestmark = pytest.mark.django_db

TASK = "tests.record"  # registered by tests/support/jobs_under_test.py; takes log and seconds

SCHEDULES = {
    "--every": ["10s", "-5s", "0", "1.5s", "99999999999w", "9" * 5000, "soon"],
    "--cron": [
        "30 2 * * 1-5",
        "0 0 31 2 *",
        "0 0 * 2 1#5",
        "61 * * * *",
        "* * *",
        "0 0 * * " + ",".join(["1"] * 200),
        "\x00 * * * *",
        "H * * * *",
    ],
    "--at": [
        "2030-01-01T09:00Z",
        "0001-01-01T00:00:00+14:00",
        "9999-12-31T23:59:59-14:00",
        "0001-01-01",
        "tomorrow",
        "2030-02-30T00:00Z",
        "1900-01-01T00:00Z",
    ],
}
OPTIONS = {
    "--tz": [
        *("Europe/Paris", "America", "Etc", "Europe/Paris\x00", "../x", "Z" * 5000, ""),
        *("localtime", "posixrules", "posix/Europe/Paris", "right/UTC"),
    ],
    "--args": ["[]", "[1]", "{}", "[", "[" * 5000 + "]" * 5000, "[" + "9" * 5000 + "]"],
    "--kwargs": [
        '{"log": "-"}',
        '{"log": "\\u0000"}',
        '{"\\u0000": "-"}',
        '{"log": "\\ud800"}',
        '{"log": "-", "seconds": "' + "x" * 70_000 + '"}',
        *BAD_RECORD_KWARGS,
        "[1]",
        "null",
    ],
    "--task": [TASK, "tests.by_city", "os.system", "", "\x00"],
    "--overlap": ["skip", "wait", "sometimes", ""],
    "--catch-up": ["latest", "none", "all"],
    "--on-lost": ["abandon", "retry", "\x00"],
    "--start-deadline": ["60s", "0", "-1", "1e400", "9" * 5000],
    "--max-retries": ["3", "-1", "101", "9" * 5000, "1.5"],
    "--retry-backoff": ["10s", "0s", "2147483648"],
    "--soft-time-limit": ["30s", "1h", "0"],
    "--time-limit": ["60s", "10s", "-1s"],
    "--lease-ttl": ["30s", "1s", "1d", "2d", "2147483648"],
    "--min-hold": ["0", "1m", "1w"],
    "--queue": ["default", "", "q" * 101, *CONTROL, *UNENCODABLE],
    "--holiday-calendar": ["US", "DE-BY", "XX", *CONTROL, *UNENCODABLE],
    "--priority": ["0", "9", "10", "-1", "x"],
    "--colour": ["red"],  # not a flag of ours
}
NAMES = ["existing", "", " ", "a/b", "N" * 191, "-", "--every", *CONTROL, *UNENCODABLE]
# Any text a script could pass, invalid UTF-8 bytes included (Python reads them as surrogates).
TEXT = any_text(max_size=30)
# A valid command to start each example from: every example then spoils one or two flags (a
# schedule flag replaces the schedule) with values that broke an edge once, or random text.
VALID = {"--task": TASK, "--kwargs": '{"log": "-"}'}
SCHEDULE = {"--every": "10s", "--cron": "30 2 * * 1-5", "--at": "2030-01-01T09:00Z"}
_FRESH = itertools.count()


def value(choices: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(choices), TEXT)


@st.composite
def add_flags(draw: st.DrawFn) -> list[str]:
    name = f"job-{next(_FRESH)}"  # not drawn: hypothesis repeats draws, names must not clash
    flags = dict(VALID)
    schedule = dict([draw(st.sampled_from(sorted(SCHEDULE.items())))])
    for flag in draw(
        st.lists(
            st.sampled_from(["NAME", "--continuous", *SCHEDULES, *OPTIONS]),
            min_size=1,
            max_size=2,
            unique=True,
        )
    ):
        if flag == "NAME":
            name = draw(value(NAMES))
        elif flag == "--continuous":
            schedule = {flag: ""}
        elif flag in SCHEDULES:
            schedule = {flag: draw(value(SCHEDULES[flag]))}
        else:
            flags[flag] = draw(value(OPTIONS[flag]))
    argv = ["add", name]
    for flag, text in {**flags, **schedule}.items():
        argv += [flag] if flag == "--continuous" else [flag, text]
    return argv


RUN_FLAGS = st.builds(lambda name: ["run", name], value(NAMES))


def _names_a_flag(detail: str, argv: list[str]) -> bool:
    """The error names what was wrong: a flag, the NAME argument, or the job that NAME named
    (``run`` of a continuous job, say: the job is named by the value given)."""
    named_job = len(argv) > 1 and detail.startswith(repr(argv[1]))
    return "--" in detail or "NAME" in detail or detail.startswith("no job named") or named_job


def test_jobs_add_and_run_answer_every_input_with_work_or_one_line_naming_the_flag() -> None:
    new_job("existing", TASK, Every(60), log="-")

    @fuzz_settings(250)
    @given(argv=st.one_of(add_flags(), RUN_FLAGS))
    def call(argv: list[str]) -> None:
        out, err = io.StringIO(), io.StringIO()
        try:
            call_command("jobs", *argv, stdout=out, stderr=err)
        except CommandError as exc:
            line = str(exc)
            prefix = f"jobs {argv[0]}: error: "
            assert line.startswith(prefix) and "\n" not in line, line
            assert _names_a_flag(line.removeprefix(prefix), argv), line
            # 1: the job named cannot be run (none such, or continuous); 2: a usage error.
            detail = line.removeprefix(prefix)
            about_the_job = argv[0] == "run" and (
                detail.startswith("no job") or detail.startswith(repr(argv[1]))
            )
            assert exc.returncode == (1 if about_the_job else 2), line
            return
        printed = out.getvalue()
        assert printed.count("\n") == 1, printed
        if argv[0] == "add":
            assert printed.startswith("added job ")
            saved = Job.objects.get(name=argv[1])
            assert not has_control_character(saved.name + saved.queue + saved.holiday_calendar)
        else:
            assert printed.strip().isdigit()

    call()


def test_running_a_continuous_job_answers_one_line_naming_it() -> None:
    """Found by the fuzzing above (a job it had just added as continuous, then ran)."""
    new_job("poller", TASK, None, log="-")
    with pytest.raises(CommandError) as info:
        call_command("jobs", "run", "poller", stdout=io.StringIO(), stderr=io.StringIO())
    line = str(info.value)
    assert line.startswith("jobs run: error: 'poller' is a continuous job") and "\n" not in line
    assert _names_a_flag(line.removeprefix("jobs run: error: "), ["run", "poller"])
    assert info.value.returncode == 1  # the job cannot be run: not a usage error


@st.composite
def window_and_token_commands(draw: st.DrawFn) -> list[str]:
    name = draw(value(["freeze", "", " ", "a/b", "N" * 101, *CONTROL]))
    verb = draw(st.sampled_from(["blackout add", "blackout remove", "apitoken create",
                                 "apitoken revoke"]))  # fmt: skip
    if verb == "blackout add":
        flags = {"--from": "2030-01-01T00:00Z", "--until": "2030-01-02T00:00Z"}
        for flag in draw(st.lists(st.sampled_from(["--from", "--until", "--job", "--description"]),
                                  max_size=2, unique=True)):  # fmt: skip
            choices = {"--job": ["existing", "nope"], "--description": ["why", "a\nb", "x" * 2001]}
            flags[flag] = draw(value([*choices.get(flag, ["2030-01-01T00:00Z"]), *CONTROL]))
        return ["jobs", "blackout", "add", name, *itertools.chain(*flags.items())]
    command, action = verb.split()
    return ["jobs", "blackout", action, name] if command == "blackout" else [command, action, name]


def test_windows_and_tokens_answer_every_input_with_work_or_one_line_naming_the_argument() -> None:
    new_job("existing", TASK, Every(60), log="-")

    @fuzz_settings(150)
    @given(argv=window_and_token_commands())
    def call(argv: list[str]) -> None:
        out, err = io.StringIO(), io.StringIO()
        try:
            call_command(*argv, stdout=out, stderr=err)
        except CommandError as exc:
            line = str(exc)
            assert "\n" not in line, line
            if exc.returncode == 1:  # no window or token of that name
                assert argv[-2] in ("remove", "revoke") and " named " in line, line
            else:
                assert exc.returncode == 2, line
                # "NAME: <why>", "--flag: <why>", or argparse's own "required: NAME" when
                # the drawn name is itself an option-like token ("--" ends the options).
                assert "NAME" in line or "--" in line, line
            return
        assert out.getvalue().count("\n") == 1, out.getvalue()
        for window in Blackout.objects.all():
            assert not has_control_character(window.name)
        for token in ApiToken.objects.all():
            assert not has_control_character(token.name)

    call()
