"""The admin's job form: the whole job (function, schedule, arguments, policies) on one page.

The schedule is typed in the same words as on the command line ("10s", "30 2 * * *" in a time
zone, an instant, or continuous) and stored through ``jobs.services``, which also writes the
django-celery-beat entry, so the admin and the CLI cannot drift apart.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django import forms
from django.contrib.admin.widgets import AdminRadioSelect, AdminSplitDateTime
from django.core.exceptions import ValidationError
from django.db import models
from django.forms.fields import InvalidJSONInput, JSONString

from jobs import registry, services
from jobs.audit import Actor
from jobs.beat import entries
from jobs.models import MAX_PAUSE_REASON, Job, JobKind
from jobs.registry import POLICY_FIELDS
from jobs.schedule import kind
from jobs.schedule.kinds import Definition, Schedule, Triggered
from jobs.values import jsonvalues
from jobs.workflow import backfill


class ScheduleType(models.TextChoices):
    """The schedule types a job defined without a schedule has; a schedule's own are its kind's
    ``form_choice`` (jobs.schedule.kind), e.g. ``interval``."""

    INTERVAL = "interval", "interval"  # the add page's default
    CONTINUOUS = "continuous", "continuous (always running on one node)"
    TRIGGERED = "triggered", "none: only after its upstreams (or run now, the API)"


def _kinds_by_choice() -> dict[str, type[Schedule]]:
    return {schedule_kind.form_choice: schedule_kind for schedule_kind in kind.registered()}


SCHEDULE_FIELDS = (
    "schedule_type",
    *dict.fromkeys(name for k in kind.registered() for name in k.form_fields),
)

# The form fields each kind of schedule reads; the page shows only the chosen kind's
# (jobs/templates/admin/jobs/job/change_form.html). Every kind but continuous may run after
# other jobs: a continuous one always runs (jobs.workflow.dependencies).
FIELDS_BY_SCHEDULE_TYPE: dict[str, tuple[str, ...]] = {
    **{choice: (*k.form_fields, "after") for choice, k in _kinds_by_choice().items()},
    ScheduleType.CONTINUOUS: (),
    ScheduleType.TRIGGERED: ("after",),
}


def _schedule_choices(stored: Schedule | None) -> list[tuple[str, str]]:
    """The kinds a new job may have, continuous and triggered, then the stored schedule's kind
    if it is one a new job may not choose (an adopted solar schedule, kept as it is)."""
    kinds = kind.registered()
    choices = [(k.form_choice, k.form_label) for k in kinds if k.offered_when_new]
    choices += [(t.value, str(t.label)) for t in (ScheduleType.CONTINUOUS, ScheduleType.TRIGGERED)]
    if stored is not None and not stored.offered_when_new:
        choices.append((stored.form_choice, stored.form_label))
    return choices


class ArgumentsField(forms.JSONField):
    """Django's JSON field, reading through ``jobs.values.jsonvalues``: whatever is typed (a NUL, an
    integer of thousands of digits, deep nesting) is a message on the field, never a 500."""

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and value not in self.empty_values and not self.disabled:
            try:
                value = jsonvalues.loads(value)
                jsonvalues.check_storable(value)
            except ValueError as exc:
                raise ValidationError(f"Enter valid JSON: {exc}.", code="invalid") from None
            if isinstance(value, str):
                return JSONString(value)
        return super().to_python(value)

    def bound_data(self, data: Any, initial: Any) -> Any:
        if self.disabled or data is None:
            return super().bound_data(data, initial)
        try:
            value = jsonvalues.loads(data)
            jsonvalues.check_storable(value)
        except ValueError:
            return InvalidJSONInput(data)  # shown again as it was typed
        return value


class TaskSelect(forms.Select):
    """The task chooser. Each choice is a task's name (and where it comes from), so the chosen one
    reads whole in the closed select on a 1366-px screen: with its summary too, it ran past the
    select's right edge and was cut. The summary (the same words as `jobs tasks`) is the
    option's title, and the job page shows the chosen task's under the select
    (admin/jobs/job/change_form.html)."""

    summaries: dict[str, str]

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs)
        self.summaries = {}

    def create_option(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        option: dict[str, Any] = super().create_option(*args, **kwargs)
        summary = self.summaries.get(str(option["value"]))
        if summary:
            option["attrs"]["title"] = summary
        return option


class JobForm(forms.ModelForm):
    """Validating this form saves the job through ``jobs.services`` (``create_job`` or
    ``save_job``), so every error services raise lands on the field it names; ``save()`` then
    only hands back the saved job. The admin makes a subclass per request whose ``actor`` is
    the logged-in user (``JobAdmin.get_form``); the audit trail records it."""

    actor: ClassVar[Actor] = Actor.code("jobs.forms.JobForm")

    task = forms.ChoiceField(
        widget=TaskSelect,
        help_text="What this job runs: a function declared with @job, or one of the project's "
        "Celery tasks (called with the arguments below; no ctx unless it declares a "
        "keyword-only ctx parameter).",
    )
    schedule_type = forms.ChoiceField(
        label="Schedule",
        choices=_schedule_choices(None),
        widget=AdminRadioSelect(attrs={"class": "radiolist inline"}),
    )
    every = forms.CharField(
        required=False,
        help_text="For an interval: e.g. 10s, 5m, 1h30m or 2d.",
    )
    cron = forms.CharField(
        required=False,
        help_text="For cron: five fields (minute hour day-of-month month day-of-week), "
        "e.g. 30 2 * * *.",
    )
    timezone = forms.CharField(
        required=False,
        initial="UTC",
        help_text="For cron: the IANA time zone the expression is read in, e.g. Europe/Paris.",
    )
    after = forms.ModelMultipleChoiceField(
        queryset=Job.objects.exclude(kind=JobKind.CONTINUOUS),
        required=False,
        to_field_name="name",
        widget=forms.SelectMultiple(attrs={"size": 6}),
        help_text="The jobs this one runs after: once for each slot all of them succeeded for "
        "(upstreams); a failed one leaves a skipped record saying which.",
    )
    run_at = forms.SplitDateTimeField(
        required=False,
        label="Run at",
        widget=AdminSplitDateTime,
        help_text="For a one-off run: the date and time, in UTC.",
    )

    class Meta:
        model = Job
        fields = ("name", "task", "enabled", "args", "kwargs", *POLICY_FIELDS)
        # Every JSON field the page has reads through jobs.values.jsonvalues (the fuzzer found
        # alert_reasons answering deep nesting with a 500).
        field_classes = {name: ArgumentsField for name in ("args", "kwargs", "alert_reasons")}
        widgets = {
            "args": forms.Textarea(attrs={"rows": 2, "cols": 60}),
            "kwargs": forms.Textarea(attrs={"rows": 3, "cols": 60}),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.schedule: Definition | None = None
        if self.instance.pk is not None:
            self.initial.setdefault("after", list(self.instance.upstreams.all()))
            # A job cannot run after itself (jobs.workflow.dependencies): not offered.
            after_field = self.fields["after"]
            assert isinstance(after_field, forms.ModelMultipleChoiceField)
            assert after_field.queryset is not None
            after_field.queryset = after_field.queryset.exclude(pk=self.instance.pk)
        self.stored_schedule = _stored_schedule(self.instance)
        task_field = self.fields["task"]
        assert isinstance(task_field, forms.ChoiceField)
        task_field.choices = _task_choices(self.instance.task)
        assert isinstance(task_field.widget, TaskSelect)
        task_field.widget.summaries = {spec.name: spec.summary for spec in registry.all_specs()}
        schedule_field = self.fields["schedule_type"]
        assert isinstance(schedule_field, forms.ChoiceField)
        schedule_field.choices = _schedule_choices(self.stored_schedule)
        for name, value in _schedule_initial(self.instance, self.stored_schedule).items():
            self.initial.setdefault(name, value)

    def clean_args(self) -> list[Any]:
        value = self.cleaned_data.get("args")
        if value is None:  # an empty box
            return []
        if not isinstance(value, list):
            raise ValidationError('Positional arguments must be a JSON list, e.g. [1, "a"].')
        return value

    def clean_alert_reasons(self) -> Any:
        # Left empty: every reason (the column's default), never NULL.
        value = self.cleaned_data.get("alert_reasons")
        return [] if value is None else value

    def clean_kwargs(self) -> dict[str, Any]:
        value = self.cleaned_data.get("kwargs")
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ValidationError(
                'Keyword arguments must be a JSON object, e.g. {"city": "Paris"}.'
            )
        return value

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        schedule_type = cleaned.get("schedule_type")
        # A value its own field already rejected gets no second message here.
        if schedule_type and not any(name in self.errors for name in SCHEDULE_FIELDS):
            try:
                self.schedule = self._parse_schedule(schedule_type, cleaned)
            except ValidationError as exc:
                self.add_error(None, exc)
        return cleaned

    def _parse_schedule(self, schedule_type: str, data: dict[str, Any]) -> Definition | None:
        """Only the fields of the chosen type are read (by its kind); the others may hold
        anything."""
        if schedule_type == ScheduleType.TRIGGERED:
            return Triggered()
        if schedule_type == ScheduleType.CONTINUOUS:
            return None
        return _kinds_by_choice()[schedule_type].from_form(data, self.stored_schedule)

    def full_clean(self) -> None:
        # Field and model validation first (they name the field of each problem), then the
        # services call, here rather than in save(): the admin shows only errors raised while
        # the form validates.
        super().full_clean()
        if self.is_bound and not self.errors:
            self._save_through_services()

    def _save_through_services(self) -> None:
        try:
            if self.instance.pk is None:
                self.instance = services.create_job(self._definition(), actor=self.actor)
            else:
                # An operator's edit: declarations in code stop overriding this job.
                self.instance.managed_by_code = False
                self.instance = services.save_job(
                    self.instance, self.schedule, actor=self.actor, after=self._after()
                )
        except ValidationError as exc:
            self._add_service_errors(exc)

    def _definition(self) -> services.JobDefinition:
        data = self.cleaned_data
        return services.JobDefinition(
            name=data["name"],
            task=data["task"],
            schedule=self.schedule,
            args=data["args"],
            kwargs=data["kwargs"],
            enabled=data["enabled"],
            policies={name: data[name] for name in POLICY_FIELDS if name in data},
            after=self._after(),
        )

    def _after(self) -> list[str]:
        if self.cleaned_data.get("schedule_type") == ScheduleType.CONTINUOUS:
            return []  # hidden for this kind, as the other kinds' fields: not read
        return [job.name for job in self.cleaned_data.get("after") or []]

    def _add_service_errors(self, exc: ValidationError) -> None:
        if not hasattr(exc, "error_dict"):
            self.add_error(None, exc)
            return
        for key, errors in exc.error_dict.items():
            self.add_error(self._field_for(key), errors)

    def _field_for(self, key: str) -> str | None:
        """The form field an error keyed by a model field belongs on (``None``: the form)."""
        if key in self.fields:
            return key
        if key in ("kind", "periodic_task"):
            return "schedule_type"
        return None  # NON_FIELD_ERRORS, or a model field the page does not show


def _stored_schedule(job: Job) -> Schedule | None:
    if job.pk is None:
        return None
    try:
        return entries.schedule_of(job.periodic_task)
    except Exception:  # an unreadable entry (a corrupted row): the operator types anew
        return None


def _schedule_initial(job: Job, schedule: Schedule | None) -> dict[str, Any]:
    """The schedule fields pre-filled from the job's beat entry (defaults on the add page)."""
    if job.pk is None:
        return {"schedule_type": ScheduleType.INTERVAL}
    if schedule is not None:
        return {"schedule_type": schedule.form_choice, **schedule.form_initial()}
    if job.kind == JobKind.CONTINUOUS:
        return {"schedule_type": ScheduleType.CONTINUOUS}
    if job.kind == JobKind.TRIGGERED:
        return {"schedule_type": ScheduleType.TRIGGERED}
    return {}  # unreadable beat entry: the operator picks a schedule again


def _task_choices(current: str) -> list[tuple[str, str]]:
    choices = [("", "---------")]
    choices += [(spec.name, _task_label(spec)) for spec in registry.all_specs()]
    if current and not registry.is_registered(current):
        # A job whose function is gone stays viewable; saving it reports the task field.
        choices.append((current, f"{current} (not registered)"))
    return choices


def _task_label(spec: registry.JobSpec) -> str:
    return spec.name if spec.origin == "job function" else f"{spec.name} ({spec.origin})"


class RunWithArgumentsForm(forms.Form):
    """The admin's "Run with arguments": one run now, its keyword arguments over the job's."""

    kwargs = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "cols": 60}),
        initial="{}",
        help_text='A JSON object, e.g. {"city": "Lyon"}: keyword arguments for this run only, '
        "over the job's own; checked against the function's signature.",
    )

    def clean_kwargs(self) -> Any:
        try:
            value = jsonvalues.loads(self.cleaned_data["kwargs"])
            jsonvalues.check_storable(value)
        except ValueError as exc:
            raise ValidationError(str(exc)) from None
        return value


class PauseForm(forms.Form):
    """The admin's "Pause…" action: one reason and one end for every job selected (the services
    check both, as for the CLI and the API)."""

    reason = forms.CharField(
        required=False,
        max_length=MAX_PAUSE_REASON,
        widget=forms.TextInput(attrs={"size": 60}),
        help_text="Why, shown in the job list: one line.",
    )
    until = forms.CharField(
        required=False,
        widget=forms.TextInput(attrs={"placeholder": "2h"}),
        help_text="When the beats resume them by themselves: a duration from now such as 2h "
        "or 1d12h, or a time, e.g. 2030-01-01T09:00 in UTC or with an offset. Empty: until "
        "someone resumes them.",
    )


# What a DateTimeField reads (Django's input formats and ISO 8601): without an offset, UTC.
_INSTANT_HINT = "e.g. 2030-01-01 09:00, in UTC, or with an offset, e.g. 2030-01-01 09:00+02:00."


class BackfillForm(forms.Form):
    """The admin's "Backfill": runs for the past slots of a range that have none."""

    since = forms.DateTimeField(
        help_text=f"The first slot to fill (inclusive): {_INSTANT_HINT}",
        widget=forms.DateTimeInput(attrs={"placeholder": "2030-01-01 09:00"}),
    )
    until = forms.DateTimeField(
        help_text=f"The last one (inclusive), not in the future: {_INSTANT_HINT}",
        widget=forms.DateTimeInput(attrs={"placeholder": "2030-01-01 18:00"}),
    )
    max_runs = forms.IntegerField(
        min_value=1,
        max_value=backfill.MAX_RUNS_LIMIT,
        initial=backfill.DEFAULT_MAX_RUNS,
        help_text="Refuse a range with more slots to fill than this.",
    )
    dry_run = forms.BooleanField(
        required=False,
        initial=True,
        help_text="Make nothing: list the slots it would fill, and their fates, to confirm.",
    )
