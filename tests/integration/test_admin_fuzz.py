"""Property-based fuzzing of the admin's job, blackout and run-with-arguments forms (hypothesis,
through the Django test client): whatever each field holds (control characters, NUL, very long
values; in JSON, any code point, lone surrogates included), the pages answer a redirect (saved,
and no saved name holds a control character) or the form again with errors on the fields at
fault; never a 500, never a traceback (the test client
re-raises any exception a view lets through)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.urls import reverse
from hypothesis import given
from hypothesis import strategies as st

from jobs import services
from jobs.audit import Actor
from jobs.forms import JobForm
from jobs.models import Blackout, Job, JobRun
from jobs.schedule.kinds import Every
from jobs.values.names import has_control_character
from tests.support.forms import job_form_data
from tests.support.fuzzing import any_text, fuzz_settings
from tests.support.hostile_values import BAD_RECORD_KWARGS, CONTROL

pytestmark = pytest.mark.django_db

TASK = "tests.record"  # registered by tests/support/jobs_under_test.py; takes log and seconds

# A valid job to start each example from: every example then spoils one to three fields of
# one kind with values that broke an edge once or sit on a limit, or with random text.
VALID: dict[str, str] = job_form_data(
    name="fuzzed",
    task=TASK,
    cron="30 2 * * 1-5",
    timezone="Europe/Paris",
    run_at_0="2030-01-02",
    run_at_1="09:30:00",
)
SPOILED_TOGETHER: dict[str, tuple[list[str], list[str]]] = {
    "json": (
        ["args", "kwargs", "alert_reasons"],
        [
            "[",
            "[" * 5000 + "]" * 5000,
            "[" + "9" * 5000 + "]",
            '["\\u0000"]',
            '{"log": "\\u0000"}',
            '{"\\u0000": 1}',
            '["\\ud800"]',
            '{"log": "\\udfff"}',
            '{"\\udcff": 1}',
            '{"log": "-", "seconds": "' + "x" * 70_000 + '"}',
            *BAD_RECORD_KWARGS,
            '"text"',
            "null",
        ],
    ),
    "schedule": (
        ["schedule_type", "every", "cron", "timezone", "run_at_0", "run_at_1"],
        [
            "cron",
            "one_off",
            "continuous",
            "0 0 31 2 *",
            "0 0 * 2 1#5",
            "0 0 * * " + ",".join(["1"] * 200),
            "61 * * * *",
            "1," * 150 + "0 * * * *",
            "America",
            "Etc",
            "Europe/Paris\x00",
            "localtime",
            "posixrules",
            "../../etc/passwd",
            "Z" * 5000,
            "-5m",
            "0s",
            "99999999999w",
            "0001-01-01",
            "1900-01-01",
            "9999-12-31",
            "23:59:59",
            "24:00",
        ],
    ),
    "number": (
        [
            "start_deadline",
            "max_retries",
            "retry_backoff",
            "soft_time_limit",
            "time_limit",
            "lease_ttl",
            "min_hold",
            "priority",
        ],
        ["-1", "0", "1", "3", "86401", "2147483648", "9" * 5000, "1e400", "NaN", "1.5", "٣"],
    ),
    "text": (
        [
            "name",
            "task",
            "queue",
            "holiday_calendar",
            "overlap",
            "catch_up",
            "on_lost",
            "enabled",
            "alert_channels",
        ],
        ["", " ", "a/b", "A" * 5000, "os.system", "tests.by_city", *CONTROL],
    ),
}
# Text as a browser may post it: encodable in UTF-8 (no lone surrogates).
TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)


@st.composite
def spoiled_forms(draw: st.DrawFn) -> dict[str, str]:
    data = dict(VALID)
    data["schedule_type"] = draw(st.sampled_from(["interval", "cron", "one_off", "continuous"]))
    fields, hostile = SPOILED_TOGETHER[draw(st.sampled_from(sorted(SPOILED_TOGETHER)))]
    for name in draw(st.lists(st.sampled_from(fields), min_size=1, max_size=3, unique=True)):
        data[name] = draw(st.one_of(st.sampled_from(hostile), TEXT))
    return data


def _named(message: str, fields: set[str]) -> bool:
    """Whether a form-wide message names the fields it is about (e.g. the time limits)."""
    text = message.lower()
    return any(name.replace("_", " ") in text or name in text for name in fields)


def test_the_job_form_answers_every_input_with_a_page_and_field_errors(admin_client: Any) -> None:
    existing = services.create_job(
        services.JobDefinition(name="existing", task=TASK, schedule=Every(60), kwargs={"log": "-"}),
        actor=Actor.code("tests"),
    )
    fields = set(JobForm.base_fields)
    urls = [reverse("admin:jobs_job_add"), reverse("admin:jobs_job_change", args=[existing.pk])]

    @fuzz_settings(80)
    @given(data=spoiled_forms(), url=st.sampled_from(urls))
    def post(data: dict[str, str], url: str) -> None:
        response = admin_client.post(url, data)

        assert response.status_code in (200, 302), response.status_code
        if response.status_code == 302:
            saved = Job.objects.get(name=data["name"].strip())
            assert not has_control_character(saved.name + saved.queue + saved.holiday_calendar)
            return
        errors = response.context["adminform"].form.errors
        assert errors, "a page shown again must say what is wrong"
        for key, messages in errors.items():
            assert key in fields or (key == "__all__" and all(_named(m, fields) for m in messages))

    post()


def test_the_blackout_form_answers_every_input_with_a_page_and_field_errors(
    admin_client: Any,
) -> None:
    existing = services.create_job(
        services.JobDefinition(name="existing", task=TASK, schedule=Every(60), kwargs={"log": "-"}),
        actor=Actor.code("tests"),
    )
    url = reverse("admin:jobs_blackout_add")
    hostile = st.one_of(st.sampled_from(["", " ", "a/b", "A" * 5000, "freeze", *CONTROL]), TEXT)
    instants = st.one_of(st.sampled_from(["2030-01-01", "00:00:00", "9999-12-31", ""]), TEXT)

    @fuzz_settings(80)
    @given(
        name=hostile,
        description=hostile,
        job=st.one_of(st.sampled_from(["", str(existing.pk), "999999", "\x00"]), TEXT),
        starts=instants,
    )
    def post(name: str, description: str, job: str, starts: str) -> None:
        data = {
            "name": name, "description": description, "job": job,
            "starts_at_0": starts, "starts_at_1": "00:00:00",
            "ends_at_0": "2031-01-01", "ends_at_1": "00:00:00",
        }  # fmt: skip
        response = admin_client.post(url, data)

        assert response.status_code in (200, 302), response.status_code
        if response.status_code == 302:
            saved = Blackout.objects.get(name=name.strip())
            assert not has_control_character(saved.name)
            return
        errors = response.context["adminform"].form.errors
        assert errors and set(errors) <= {"name", "description", "job", "starts_at", "ends_at"}

    post()


def test_run_with_arguments_answers_any_kwargs_with_a_run_or_an_error_on_them(
    admin_client: Any,
) -> None:
    existing = services.create_job(
        services.JobDefinition(name="existing", task=TASK, schedule=Every(60), kwargs={"log": "-"}),
        actor=Actor.code("tests"),
    )
    url = reverse("admin:jobs_job_run", args=[existing.pk])
    # JSON as typed, its strings any code points (a lone surrogate typed as its \\u escape).
    drawn = st.dictionaries(st.sampled_from(["log", "seconds"]) | any_text(), any_text())
    typed = st.one_of(st.sampled_from(SPOILED_TOGETHER["json"][1]), drawn.map(json.dumps))

    @fuzz_settings(60)
    @given(kwargs=typed)
    def post(kwargs: str) -> None:
        response = admin_client.post(url, {"kwargs": kwargs})

        assert response.status_code in (200, 302), response.status_code
        if response.status_code == 302:
            run = JobRun.objects.latest("pk")
            given = json.loads(kwargs)
            assert run.kwargs == (None if given is None else {"log": "-", **given})
            return
        errors = response.context["form"].errors
        assert errors and set(errors) <= {"kwargs", "__all__"}, errors

    post()
