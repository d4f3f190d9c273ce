"""The admin's forms (jobs.forms), bound to what a page posts: the job form validates the
schedule typed in words and saves through ``jobs.services`` (its errors on the field they
name), and the run-with-arguments and backfill forms read their inputs safely."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from jobs import registry
from jobs.beat import entries
from jobs.forms import BackfillForm, JobForm, RunWithArgumentsForm, ScheduleType
from jobs.models import AuditEntry, Job, JobKind
from jobs.schedule.kinds import At, Cron, Every, Triggered
from jobs.workflow.backfill import MAX_RUNS_LIMIT
from tests.support.forms import job_form_data

pytestmark = pytest.mark.django_db


def _schedule(job: Job) -> object:
    return entries.schedule_of(Job.objects.get(pk=job.pk).periodic_task)


def _bound(*, instance: Job | None = None, **overrides: str) -> JobForm:
    return JobForm(data=job_form_data(**overrides), instance=instance)


def test_a_valid_form_creates_the_job_through_the_services_as_its_actor() -> None:
    form = _bound(every="90s")
    assert form.is_valid(), form.errors
    job = form.save()
    assert Job.objects.get(name="report") == job and job.kwargs == {"log": "-"}
    assert _schedule(job) == Every(90)
    (entry,) = AuditEntry.objects.filter(job_name="report")
    assert (entry.action, entry.actor) == ("add", "code:jobs.forms.JobForm")


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"schedule_type": "cron", "cron": "30 2 * * *", "timezone": "Europe/Paris"},
            Cron("30 2 * * *", tz="Europe/Paris"),
        ),
        (
            {"schedule_type": "one_off", "run_at_0": "2030-01-01", "run_at_1": "09:00"},
            At(datetime(2030, 1, 1, 9, 0, tzinfo=UTC)),
        ),
        ({"schedule_type": "triggered", "every": "not read"}, None),
    ],
    ids=["cron", "one-off", "triggered"],
)
def test_each_kind_of_schedule_is_read_from_its_own_fields(
    fields: dict[str, str], expected: object
) -> None:
    form = JobForm(data=job_form_data(**fields))
    assert form.is_valid(), form.errors
    job = form.save()
    if expected is None:
        assert job.kind == JobKind.TRIGGERED and isinstance(form.schedule, Triggered)
    else:
        assert _schedule(job) == expected


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"every": ""}, "every", "Give the interval"),
        ({"every": "1000000000000d"}, "every", "too long"),
        ({"schedule_type": "cron", "cron": ""}, "cron", "Give a cron expression"),
        ({"schedule_type": "one_off"}, "run_at", "Give the date and time"),
        ({"args": '{"a": 1}'}, "args", "must be a JSON list"),
        ({"kwargs": "[1]"}, "kwargs", "must be a JSON object"),
        ({"kwargs": '{"log": "\\u0000"}'}, "kwargs", "Enter valid JSON"),
    ],
)
def test_a_mistake_is_named_on_its_field_and_nothing_is_saved(
    fields: dict[str, str], field: str, words: str
) -> None:
    form = JobForm(data=job_form_data(**fields))
    assert not form.is_valid()
    assert any(words in message for message in form.errors[field]), form.errors
    assert not Job.objects.exists()


def test_a_bad_zone_and_a_bad_expression_are_both_named_at_once() -> None:
    form = _bound(schedule_type="cron", cron="61 * * * *", timezone="Mars/Olympus")
    assert not form.is_valid()
    assert form.errors["timezone"] and form.errors["cron"]


def test_json_typed_wrong_is_shown_again_as_typed() -> None:
    form = _bound(kwargs='{"log": ')
    assert not form.is_valid()
    assert form["kwargs"].value() == '{"log": '


def test_an_error_of_the_services_lands_on_the_field_it_names() -> None:
    form = _bound(kwargs="{}")  # tests.record needs its log
    assert not form.is_valid()
    assert "missing a required argument: 'log'" in form.errors["args"][0]
    assert not Job.objects.exists()


def test_editing_prefills_the_schedule_and_keeps_the_intervals_anchor(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("report", schedule=Every(60, anchor=datetime(2030, 1, 1, tzinfo=UTC)))
    job.managed_by_code = True
    job.save(update_fields=["managed_by_code"])
    job = Job.objects.get(pk=job.pk)
    shown = JobForm(instance=job)
    assert (shown.initial["schedule_type"], shown.initial["every"]) == ("interval", "1m")
    form = _bound(instance=job, every="60s", kwargs='{"log": "x"}')
    assert form.is_valid(), form.errors
    saved = Job.objects.get(pk=job.pk)
    assert saved.kwargs == {"log": "x"} and not saved.managed_by_code
    assert _schedule(saved) == Every(60, anchor=datetime(2030, 1, 1, tzinfo=UTC))


def test_the_schedule_initial_follows_the_jobs_kind(make_job: Callable[..., Job]) -> None:
    cron = make_job("c", schedule=Cron("0 3 * * *", tz="Europe/Paris"))
    assert {
        k: JobForm(instance=cron).initial[k] for k in ("schedule_type", "cron", "timezone")
    } == {
        "schedule_type": "cron",
        "cron": "0 3 * * *",
        "timezone": "Europe/Paris",
    }
    triggered = make_job("t", schedule=Triggered())
    assert JobForm(instance=triggered).initial["schedule_type"] == ScheduleType.TRIGGERED
    assert JobForm().initial["schedule_type"] == ScheduleType.INTERVAL


def test_a_job_is_not_offered_as_its_own_upstream(make_job: Callable[..., Job]) -> None:
    make_job("extract")
    job = make_job("report", after=["extract"])
    form = JobForm(instance=job)
    offered = [choice.instance.name for choice, _ in form.fields["after"].choices if choice]  # type: ignore[attr-defined]
    assert offered == ["extract"]
    assert [upstream.name for upstream in form.initial["after"]] == ["extract"]


def test_a_task_no_longer_registered_stays_a_choice_saying_so(
    make_job: Callable[..., Job], monkeypatch: pytest.MonkeyPatch
) -> None:
    job = make_job("report")
    monkeypatch.setattr(registry, "is_registered", lambda name: False)
    choices = dict(JobForm(instance=job).fields["task"].choices)  # type: ignore[attr-defined]
    assert choices["tests.record"] == "tests.record (not registered)"


def test_run_with_arguments_reads_a_json_object_safely() -> None:
    form = RunWithArgumentsForm(data={"kwargs": '{"city": "Lyon"}'})
    assert form.is_valid() and form.cleaned_data["kwargs"] == {"city": "Lyon"}
    nested = RunWithArgumentsForm(data={"kwargs": "[" * 100_000})
    assert not nested.is_valid() and nested.errors["kwargs"]


def test_the_backfill_form_bounds_its_maximum() -> None:
    data = {"since": "2030-01-01 09:00", "until": "2030-01-01 18:00+02:00", "max_runs": "10"}
    form = BackfillForm(data=data)
    assert form.is_valid(), form.errors
    assert form.cleaned_data["since"] == datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
    assert form.cleaned_data["until"] == datetime(2030, 1, 1, 16, 0, tzinfo=UTC)
    assert form.cleaned_data["dry_run"] is False  # an unticked box
    too_many = BackfillForm(data={**data, "max_runs": str(MAX_RUNS_LIMIT + 1)})
    assert not too_many.is_valid() and "max_runs" in too_many.errors
