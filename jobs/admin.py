"""The admin: each job on one page (function, schedule, arguments, policies) with its recent
runs; run history, leases and nodes read-only, because only the cluster writes them.

django-celery-beat's own pages are removed: its rows carry job schedules and are written only
through the job page (``jobs.forms.JobForm`` → ``jobs.services`` → ``jobs.beat.entries``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import django_celery_beat.admin  # noqa: F401  (its registrations must exist before we undo them)
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import model_ngettext, unquote
from django.contrib.postgres.expressions import ArraySubquery
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import (
    BooleanField,
    CharField,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    OuterRef,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.functions import Concat, Now
from django.forms.models import BaseInlineFormSet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)

from jobs import services
from jobs.audit import JOB_FIELDS, Actor
from jobs.beat import schedule_errors, slot_fates, switch_report
from jobs.continuous.nodes import Liveness, unconsumed_queues, with_liveness
from jobs.database.database_clock import database_now
from jobs.database.large_tables import EstimatedCountPaginator
from jobs.exceptions import NotTriggerable
from jobs.forms import (
    FIELDS_BY_SCHEDULE_TYPE,
    SCHEDULE_FIELDS,
    BackfillForm,
    JobForm,
    PauseForm,
    RunWithArgumentsForm,
)
from jobs.models import (
    JOB_DISPLAY_RELATED,
    LIVE_LEASE,
    AlertDelivery,
    ApiToken,
    AuditEntry,
    AuditSource,
    Blackout,
    DeliveryState,
    Incident,
    Job,
    JobKind,
    JobRun,
    Lease,
    Node,
    RunStatus,
)
from jobs.registry import POLICY_FIELDS
from jobs.runlog import reading
from jobs.values import serializers, text, timestamps
from jobs.web import duration_chart, tokens

# The job list names at most this many queues no live worker consumes (/healthz lists them).
LISTED_QUEUES = 5

for _beat_model in (
    PeriodicTask,
    IntervalSchedule,
    CrontabSchedule,
    SolarSchedule,
    ClockedSchedule,
):
    admin.site.unregister(_beat_model)

RECENT_RUNS = 20
RECENT_AUDIT_ENTRIES = 10
# The next slots a job's page lists with their fates (``jobs upcoming`` lists more).
UPCOMING_ON_PAGE = 10
# The slots a backfill's preview lists on its page at most (`jobs backfill --dry-run` lists all).
PREVIEW_ON_PAGE = 1000

# The admin index links the jobs dashboard (jobs.web.dashboard).
admin.site.index_template = "admin/jobs_index.html"

_STATUS_COLOURS = {
    RunStatus.SCHEDULED: "#777",
    RunStatus.RUNNING: "#1565c0",
    RunStatus.SUCCEEDED: "#2e7d32",
    RunStatus.FAILED: "#c62828",
    RunStatus.LOST: "#c62828",
    RunStatus.MISSED: "#ef6c00",
    RunStatus.SKIPPED: "#ef6c00",
    RunStatus.CANCELLED: "#777",
}


def status_badge(status: str | None) -> SafeString | str:
    if not status:
        return "-"
    colour = _STATUS_COLOURS.get(RunStatus(status), "inherit")
    return format_html('<strong style="color: {}">{}</strong>', colour, status)


def _seconds(value: float | None) -> str | None:
    return None if value is None else f"{value:.2f} s"


def run_duration(run: JobRun) -> str:
    """A run's duration as the run list, the run's page and the job's recent runs show it."""
    seconds = _seconds(run.duration)
    return "-" if seconds is None else serializers.duration_words(run, seconds)


def one_line(text: str, *, keep_end: bool = False) -> SafeString:
    """``text`` on one line in a narrow list column (a dotted task name cut at a dot reads as
    two): cut short with an ellipsis when the column is narrower, at its start when ``keep_end``
    (a dotted name's last part says the most), the whole text in the title."""
    if keep_end:
        return format_html(
            '<span class="whole-token keep-end" title="{}"><span dir="ltr">{}</span></span>',
            text,
            text,
        )
    return format_html('<span class="whole-token" title="{}">{}</span>', text, text)


def holder_html(holder: str, token: int | None = None) -> SafeString:
    """A lease holder (``node:pid:run-N``, jobs.guard.runner) and its fencing token in a narrow
    list column: a line breaks after the node, the pid or the run, never inside one
    (``worker2@vm:30187`` is not read as pid 3018 over two lines); a node name longer than the
    column ends in an ellipsis, the whole holder in the title."""
    parts = holder.split(":")
    tokens = [f"{part}:" for part in parts[:-1]] + parts[-1:]
    spans = format_html_join(
        mark_safe("<wbr>"), '<span class="whole-token">{}</span>', ((t,) for t in tokens)
    )
    if token is None:
        return format_html('<span title="{}">{}</span>', holder, spans)
    return format_html(
        '<span title="{} #{}">{} <span class="whole-token">#{}</span></span>',
        holder,
        token,
        spans,
        token,
    )


class ViewOnly:
    """No add, change or delete for anyone: only the view permission counts. A model admin's
    ``has_add_permission`` is asked without ``obj``, an inline's with it."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyAdmin(ViewOnly, admin.ModelAdmin):
    """Rows the cluster writes; people only look at them."""


class RecentFormSet(BaseInlineFormSet):
    """Only the newest ``limit`` rows: a job's history may hold millions. Cached, because every
    slice of an unevaluated queryset would be its own query."""

    limit = 10
    select_related: tuple[str, ...] = ()

    def get_queryset(self) -> QuerySet[Any]:
        if not hasattr(self, "_recent"):
            rows = super().get_queryset()
            if self.select_related:
                rows = rows.select_related(*self.select_related)
            self._recent = rows[: self.limit]
        return self._recent


class RecentRunsFormSet(RecentFormSet):
    limit = RECENT_RUNS
    select_related = ("job",)  # each row is titled by its run: job name @ slot


class RecentAuditFormSet(RecentFormSet):
    limit = RECENT_AUDIT_ENTRIES


class ReadOnlyInline(ViewOnly, admin.TabularInline):
    """History shown on a job's page: nothing to add, change or delete there."""

    show_change_link = True
    extra = 0
    can_delete = False


class RecentRunsInline(ReadOnlyInline):
    model = JobRun
    formset = RecentRunsFormSet
    verbose_name_plural = f"recent runs (last {RECENT_RUNS})"
    fields = readonly_fields = (
        "scheduled_for",
        "status_badge",
        "trigger",
        "attempt",
        "node",
        "started_at",
        "duration",
        "error",
    )

    @admin.display(description="status")
    def status_badge(self, run: JobRun) -> SafeString | str:
        return status_badge(run.status)

    @admin.display(description="duration")
    def duration(self, run: JobRun) -> str | None:
        return run_duration(run)


def _actor(request: HttpRequest) -> Actor:
    return Actor.user(request.user, AuditSource.ADMIN)


def _add_errors(form: Any, exc: ValidationError) -> None:
    """A service's ``ValidationError`` on the form: under the field it names, if the form has it."""
    for field, messages_ in exc.message_dict.items():
        form.add_error(field if field in form.fields else None, messages_)


class RecentAuditInline(ReadOnlyInline):
    """The job's latest audit entries on its page; the link under the runs leads to all."""

    model = AuditEntry
    fk_name = "job"
    formset = RecentAuditFormSet
    verbose_name_plural = f"audit trail (last {RECENT_AUDIT_ENTRIES})"
    fields = readonly_fields = ("at", "actor", "source", "action", "changes")

    @admin.display(description="before → after")
    def changes(self, entry: AuditEntry) -> str:
        return audit_changes(entry)


# A list row says which values changed, briefly: the first few, each cut short (an ``add`` holds
# the whole job, 30 values). The entry's page has them all, whole.
AUDIT_VALUES_LISTED = 4
AUDIT_VALUE_CHARS = 32


def audit_changes(entry: AuditEntry) -> str:
    """``field: old → new`` per changed value (``field: new`` for an added job), in the order
    people read a job's fields, the first ``AUDIT_VALUES_LISTED``, then how many more."""
    before, after = entry.before or {}, entry.after or {}
    keys = sorted(dict.fromkeys([*before, *after]), key=_reading_order)
    parts = []
    for key in keys[:AUDIT_VALUES_LISTED]:
        new = _short_json(after[key]) if key in after else "-"
        parts.append(
            f"{key}: {_short_json(before[key])} → {new}" if key in before else f"{key}: {new}"
        )
    if len(keys) > AUDIT_VALUES_LISTED:
        parts.append(f"and {len(keys) - AUDIT_VALUES_LISTED} more")
    return "; ".join(parts) or "-"


def _reading_order(key: str) -> int:
    # jsonb keeps an entry's keys shortest first; a job's read name, task, kind, schedule first.
    return JOB_FIELDS.index(key) if key in JOB_FIELDS else len(JOB_FIELDS)


def _short_json(value: Any) -> str:
    return text.cut(json.dumps(value, ensure_ascii=False), AUDIT_VALUE_CHARS)


def pause_words(job: Job) -> SafeString | str:
    """Who paused a job, until when and why, under its name in the list (nothing running)."""
    if job.enabled or not (job.paused_by or job.pause_reason or job.paused_until):
        return ""
    until = "" if job.paused_until is None else f" until {timestamps.display(job.paused_until)}"
    by = f" by {job.paused_by}" if job.paused_by else ""
    reason = f": {job.pause_reason}" if job.pause_reason else ""
    return format_html('<br><span class="job-pause">paused{}{}{}</span>', by, until, reason)


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    form = JobForm
    # Six columns that fit a 1366-px screen beside the filters (the styles that let long
    # names wrap: jobs/templates/admin/jobs/job/change_list.html).
    list_display = ["name_and_state", "task_name", "schedule", "next_slot", "last_run", "lease"]
    list_filter = ["enabled", "kind", "adopted", "task"]
    search_fields = ["name", "task"]
    actions = ["run_now", "pause", "resume", "release_lease", "mute_2h", "mute_1d", "unmute"]
    now_fields = ["next_slot", "upcoming_slots", "lease"]
    record_fields = [
        "schedule",
        "runs_before",
        "open_incidents",
        "alerts_muted_until",
        "managed_by_code",
        "adopted",
        "headers",
        "expires_at",
        "one_off",
        "description",
        "created_at",
        "updated_at",
        "audit_trail",
    ]
    readonly_fields = [*now_fields, "durations", *record_fields]
    inlines = [RecentRunsInline, RecentAuditInline]

    def get_form(
        self, request: HttpRequest, obj: Job | None = None, change: bool = False, **kwargs: Any
    ) -> Any:
        """The job form, saving through the services as the logged-in user (audit trail)."""
        form = super().get_form(request, obj, change, **kwargs)
        return type(form.__name__, (form,), {"actor": _actor(request)})

    def get_fieldsets(self, request: HttpRequest, obj: Job | None = None) -> Any:
        fieldsets: list[tuple[str | None, dict[str, Any]]] = [
            (None, {"fields": ["name", "task", "enabled"]}),
            (
                "Schedule",
                {"fields": [*SCHEDULE_FIELDS, "after"]},
            ),
            ("Arguments", {"fields": ["args", "kwargs"]}),
            ("Policies", {"classes": ["collapse"], "fields": list(POLICY_FIELDS)}),
        ]
        if obj is not None:
            fieldsets.insert(0, ("Now", {"fields": self.now_fields}))
            fieldsets.append(("Durations", {"fields": ["durations"]}))
            fieldsets.append(("Record", {"fields": self.record_fields}))
        return fieldsets

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any
    ) -> Any:
        # For the page's script that shows only the chosen schedule kind's fields.
        context["schedule_fields"] = FIELDS_BY_SCHEDULE_TYPE
        return super().render_change_form(request, context, *args, **kwargs)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        """Jobs with their beat entry, last run and live lease in one query."""
        runs = JobRun.objects.filter(job=OuterRef("pk")).order_by("-scheduled_for", "-id")
        # Mirrors Job.lock_key, so the lease lookup stays inside this one query.
        leases = Lease.objects.filter(
            LIVE_LEASE,
            key=Concat(Value("job:"), OuterRef("name"), output_field=CharField()),
        )
        return (
            super()
            .get_queryset(request)
            .select_related(*JOB_DISPLAY_RELATED)
            .annotate(
                last_run_status=Subquery(runs.values("status")[:1]),
                last_run_at=Subquery(runs.values("scheduled_for")[:1]),
                lease_holder=Subquery(leases.values("holder")[:1]),
                lease_token=Subquery(leases.values("token")[:1]),
            )
        )

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        # Periodic tasks declared for Celery that no job carries do not run: say so where
        # jobs are (configuration entries, django-celery-beat rows).
        if request.method == "GET":
            for line in switch_report.not_carried():
                messages.warning(
                    request,
                    f"{line.source} {line.name!r} ({line.task}) is not adopted and does not "
                    f"run: {line.reason}",
                )
            for queue, jobs in unconsumed_queues()[:LISTED_QUEUES]:
                messages.warning(
                    request,
                    f"{jobs} enabled job(s) publish to queue {queue!r}, which no live worker "
                    "consumes: their runs wait until they miss their start deadline (start a "
                    f"worker with -Q {queue}).",
                )
        return super().changelist_view(request, extra_context)

    def get_inline_instances(self, request: HttpRequest, obj: Job | None = None) -> Any:
        # The runs are display-only, and the form has already saved the job through services
        # by the time inline formsets would be validated: with no inline on POST, nothing can
        # reject the request after the job was written.
        if obj is None or request.method == "POST":
            return []
        return super().get_inline_instances(request, obj)

    def save_model(self, request: HttpRequest, obj: Job, form: Any, change: bool) -> None:
        """Nothing to write: validating ``JobForm`` saved the job through ``jobs.services``."""

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        # Also deletes the beat entry, which the cascade would not.
        services.remove(obj.name, actor=_actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        for job in queryset:
            services.remove(job.name, actor=_actor(request))

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        # Runs are history owned by their job: deleting a job deletes them without asking for
        # a run permission nobody has, and the page counts them instead of listing millions.
        jobs = list(objs)
        run_count = JobRun.objects.filter(job__in=jobs).count()
        summary = {
            Job._meta.verbose_name_plural: len(jobs),
            JobRun._meta.verbose_name_plural: run_count,
        }
        # The delete view and action have already checked the job delete permission.
        return [str(job) for job in jobs], summary, set(), []

    @admin.display(description="audit trail")
    def audit_trail(self, job: Job) -> SafeString:
        url = reverse("admin:jobs_auditentry_changelist")
        return format_html(
            '<a href="{}?job__id__exact={}">every entry of this job</a>', url, job.pk
        )

    @admin.display(description="schedule")
    def schedule(self, job: Job) -> SafeString | str:
        error = serializers.schedule_error(job)
        if error is None:
            return serializers.schedule_words(job)
        return format_html(
            '{}<br><strong class="errornote">cannot be scheduled: {}</strong>',
            serializers.schedule_words(job),
            error,
        )

    @admin.display(description="name", ordering="name")
    def name_and_state(self, job: Job) -> SafeString | str:
        """The name, and a badge on a paused job (its row is greyed too)."""
        if job.enabled:
            return job.name
        badge = format_html('{} <span class="job-paused">paused</span>', job.name)
        return format_html("{}{}", badge, pause_words(job))

    @admin.display(description="next slot")
    def next_slot(self, job: Job) -> str:
        return serializers.next_slot_words(job, timezone.now(), timestamps.display)

    @admin.display(description="next slots and their fates")
    def upcoming_slots(self, job: Job) -> SafeString | str:
        """The next slots, each with what the beats make of it (jobs.beat.slot_fates)."""
        if job.pk is None or job.kind == JobKind.TRIGGERED:
            return "-"
        try:
            fates = slot_fates.upcoming(job, since=database_now(), count=UPCOMING_ON_PAGE)
        except NotTriggerable:
            return "none: a continuous job has no slots"
        except Exception as exc:  # a row written around validation must not break the page
            return f"cannot be worked out: {schedule_errors.describe(exc)}"
        return render_to_string("admin/jobs/job/slot_fates.html", {"fates": fates})

    @admin.display(description="task", ordering="task")
    def task_name(self, job: Job) -> SafeString:
        """The dotted name on one line, its end in view (jobs.admin.one_line)."""
        return one_line(job.task, keep_end=True)

    @admin.display(description="last run (slot)", ordering="last_run_at")
    def last_run(self, job: Job) -> SafeString | str:
        status = getattr(job, "last_run_status", None)
        if status is None:
            return "-"
        slot = timestamps.display(getattr(job, "last_run_at", None))
        return format_html("{}<br>{}", status_badge(status), slot)

    @admin.display(description="jobs after it")
    def runs_before(self, job: Job) -> SafeString | str:
        """Its downstreams (jobs.workflow.dependencies), linked."""
        downstreams = list(job.downstreams.order_by("name"))
        if not downstreams:
            return "none"
        return format_html_join(
            ", ",
            '<a href="{}">{}</a>',
            ((reverse("admin:jobs_job_change", args=[d.pk]), d.name) for d in downstreams),
        )

    @admin.display(description="last runs")
    def durations(self, job: Job) -> SafeString | str:
        """Its runs' durations with its baseline band and limits (jobs.alerts.baseline)."""
        view = duration_chart.duration_view(job, timezone.now())
        if not view.points:
            return "none started yet"
        return format_html(
            '{}<div class="help duration-caption">{}</div>',
            duration_chart.chart_svg(view),
            duration_chart.caption(view),
        )

    @admin.display(description="lease holder #token")
    def lease(self, job: Job) -> SafeString | str:
        """The live lease of the job's default key, by the database clock."""
        holder = getattr(job, "lease_holder", None)
        return "-" if holder is None else holder_html(holder, getattr(job, "lease_token", None))

    # --- the job page's own forms: run with arguments, backfill -------------------------------
    def get_urls(self) -> list[Any]:
        pages = [
            path(
                "<path:object_id>/run/",
                self.admin_site.admin_view(self.run_with_arguments_view),
                name="jobs_job_run",
            ),
            path(
                "<path:object_id>/backfill/",
                self.admin_site.admin_view(self.backfill_view),
                name="jobs_job_backfill",
            ),
        ]
        return pages + super().get_urls()

    def run_with_arguments_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        job = self._job_to_change(request, object_id)
        form = RunWithArgumentsForm(request.POST if request.method == "POST" else None)
        if form.is_valid():
            try:
                run = services.run_now(
                    job.name, actor=_actor(request), kwargs=form.cleaned_data["kwargs"]
                )
            except ValidationError as exc:
                _add_errors(form, exc)
            except NotTriggerable as exc:
                form.add_error(None, str(exc))
            else:
                self.message_user(request, f"Triggered run #{run.pk}.", messages.SUCCESS)
                return redirect("admin:jobs_job_change", job.pk)
        return self._job_form_page(request, job, form, "Run with arguments", "Run now")

    def backfill_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        job = self._job_to_change(request, object_id)
        form = BackfillForm(request.POST if request.method == "POST" else None)
        if form.is_valid():
            data = form.cleaned_data
            try:
                result = services.backfill_job(
                    job.name,
                    data["since"],
                    data["until"],
                    actor=_actor(request),
                    max_runs=data["max_runs"],
                    dry_run=data["dry_run"],
                )
            except ValidationError as exc:
                _add_errors(form, exc)
            except NotTriggerable as exc:
                form.add_error(None, str(exc))
            else:
                planned = result.plan
                if result.dry_run:
                    self.message_user(
                        request,
                        f"Would make {len(planned.missing)} run(s), listed below; "
                        f"{planned.on_record} slot(s) of the range already have one. "
                        "Make them to confirm.",
                        messages.INFO,
                    )
                    # The same range again, not dry: its button makes the runs listed.
                    confirm = BackfillForm(initial={**data, "dry_run": False})
                    return self._job_form_page(
                        request, job, confirm, "Backfill", "Make these runs", result.fates
                    )
                else:
                    self.message_user(
                        request,
                        f"Made {result.created} backfill run(s); they run one at a time, "
                        "oldest slot first.",
                        messages.SUCCESS,
                    )
                    return redirect("admin:jobs_job_change", job.pk)
        return self._job_form_page(request, job, form, "Backfill", "Backfill")

    def _job_to_change(self, request: HttpRequest, object_id: str) -> Job:
        job = self.get_object(request, unquote(object_id))
        if job is None:
            raise Http404(f"No job with id {object_id!r}.")
        if not self.has_change_permission(request, job):
            raise PermissionDenied
        return job

    def _job_form_page(
        self,
        request: HttpRequest,
        job: Job,
        form: Any,
        title: str,
        submit: str,
        fates: Sequence[slot_fates.Fate] = (),
    ) -> HttpResponse:
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": job,
            "title": f"{title}: {job.name}",
            "form": form,
            "submit": submit,
            # A backfill's preview, listed before the button that confirms it; a long one cut.
            "fates": fates[:PREVIEW_ON_PAGE],
            "more_fates": max(0, len(fates) - PREVIEW_ON_PAGE),
        }
        return TemplateResponse(request, "admin/jobs/job/job_form_page.html", context)

    @admin.action(description="Run now", permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        runs = []
        for job in queryset:
            try:
                runs.append(services.run_now(job.name, actor=_actor(request)))
            except NotTriggerable as exc:
                self.message_user(request, str(exc), messages.WARNING)
        if runs:
            ids = ", ".join(f"#{run.pk}" for run in runs)
            self.message_user(request, f"Triggered {len(runs)} run(s): {ids}.", messages.SUCCESS)

    @admin.action(description="Pause…", permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        """Ask for a reason and an end, then pause every job selected with them."""
        form = PauseForm(request.POST if "apply" in request.POST else None)
        jobs = list(queryset.select_related(*JOB_DISPLAY_RELATED).order_by("name"))
        if form.is_valid():
            try:
                services.pause_each(jobs, **form.cleaned_data, actor=_actor(request))
            except ValidationError as exc:
                _add_errors(form, exc)
            else:
                noun = model_ngettext(self.opts, len(jobs))
                self.message_user(request, f"Paused {len(jobs)} {noun}.", messages.SUCCESS)
                return None
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Pause {len(jobs)} {model_ngettext(self.opts, len(jobs))}",
            "form": form,
            "jobs": jobs,
            "action": "pause",
            "select_across": request.POST.get("select_across", "0"),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/jobs/job/pause_selected.html", context)

    @admin.action(description="Resume", permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._set_enabled(request, queryset, enabled=True)

    @admin.action(description="Mute alerts for 2 hours", permissions=["change"])
    def mute_2h(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._mute(request, queryset, timedelta(hours=2))

    @admin.action(description="Mute alerts for a day", permissions=["change"])
    def mute_1d(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._mute(request, queryset, timedelta(days=1))

    @admin.action(description="Unmute alerts", permissions=["change"])
    def unmute(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._mute(request, queryset, None)

    def _mute(self, request: HttpRequest, queryset: QuerySet[Job], span: timedelta | None) -> None:
        until = None if span is None else database_now() + span
        jobs = list(queryset)
        for job in jobs:
            services.mute(job.name, until, actor=_actor(request))
        noun = model_ngettext(self.opts, len(jobs))
        done = "Unmuted" if until is None else f"Muted until {until:%Y-%m-%d %H:%M} UTC:"
        self.message_user(request, f"{done} {len(jobs)} {noun}.", messages.SUCCESS)

    @admin.display(description="open incidents")
    def open_incidents(self, job: Job) -> SafeString | str:
        incidents = list(job.incidents.filter(resolved_at__isnull=True))
        if not incidents:
            return "none"
        return format_html_join(
            ", ",
            '<a href="{}">#{} {} ({}, {}) since {}</a>',
            (
                (
                    reverse("admin:jobs_incident_change", args=[i.pk]),
                    i.pk,
                    i.kind,
                    i.reason,
                    i.bad_runs_words,
                    timestamps.display(i.opened_at),
                )
                for i in incidents
            ),
        )

    def _set_enabled(self, request: HttpRequest, queryset: QuerySet[Job], *, enabled: bool) -> None:
        jobs = list(queryset)
        for job in jobs:
            services.set_enabled(job, enabled, actor=_actor(request))
        verb = "Resumed" if enabled else "Paused"
        noun = model_ngettext(self.opts, len(jobs))
        self.message_user(request, f"{verb} {len(jobs)} {noun}.", messages.SUCCESS)

    @admin.action(description="Release lease", permissions=["change"])
    def release_lease(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        jobs = list(queryset)
        released = sum(services.release_lease(job.name, actor=_actor(request)) for job in jobs)
        self.message_user(
            request,
            f"Released {released} lease(s); {len(jobs) - released} job(s) held none. "
            "A released holder stays fenced out: the next run gets a higher token.",
            messages.SUCCESS,
        )


class RunNodeFilter(admin.SimpleListFilter):
    """The nodes the cluster knows (its node table), not every distinct value of the run
    table's column: that would read all its rows on every page."""

    title = "node"
    parameter_name = "node"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            (name, name) for name in Node.objects.order_by("name").values_list("name", flat=True)
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset if value is None else queryset.filter(node=value)


@admin.register(JobRun)
class JobRunAdmin(ReadOnlyAdmin):
    # Eight columns that fit a 1366-px screen beside the filters, as the job list's six: the
    # trigger and attempt under the status, the fencing token on the run's page (the styles that
    # let names and times wrap: jobs/templates/admin/jobs/change_list.html).
    list_display = [
        "id",
        "job_link",
        "scheduled_for",
        "status_trigger",
        "node",
        "lag",
        "duration",
        "flower",
    ]
    list_filter = ["job", "status", "trigger", RunNodeFilter, "scheduled_for"]
    search_fields = ["job__name", "node", "task_id"]
    # Counting a table of millions of runs is the slow part of the list: not twice per page,
    # and by PostgreSQL's estimate when nothing is filtered (the page says so).
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    change_list_template = "admin/jobs/jobrun/change_list.html"
    # The run's log follows a running run without a reload (the template's script).
    change_form_template = "admin/jobs/jobrun/change_form.html"
    readonly_fields = [
        "job_link", "status_badge", "lag", "duration", "traceback_block", "flower", "chain",
        "log_block",
    ]  # fmt: skip

    def get_queryset(self, request: HttpRequest) -> QuerySet[JobRun]:
        # A run is titled and linked by its job's name, on the list and on its page.
        return super().get_queryset(request).select_related("job")

    @admin.display(description="chain")
    def chain(self, run: JobRun) -> SafeString | str:
        """The upstream run that made this one and the runs this one made
        (jobs.workflow.dependencies)."""

        def link(other: JobRun) -> SafeString:
            url = reverse("admin:jobs_jobrun_change", args=[other.pk])
            return format_html('<a href="{}">{} #{} ({})</a>', url, other.job.name, other.pk,
                               other.status)  # fmt: skip

        parts: list[SafeString] = []
        if run.upstream_run_id is not None:
            upstream = JobRun.objects.select_related("job").filter(pk=run.upstream_run_id).first()
            if upstream is not None:
                parts.append(format_html("after {}", link(upstream)))
        made = list(run.downstream_runs.select_related("job").order_by("id")[:20])
        if made:
            parts.append(
                format_html("then {}", format_html_join(", ", "{}", ((link(m),) for m in made)))
            )
        return format_html_join("; ", "{}", ((part,) for part in parts)) if parts else "-"

    fieldsets = [
        (
            None,
            {
                "fields": [
                    *("job_link", "scheduled_for", "status_badge", "trigger", "attempt"),
                    "chain",
                ]
            },
        ),
        # A call's own arguments (jobs.calls); empty for every other run, which takes the job's.
        ("Arguments of the call", {"fields": ["args", "kwargs"]}),
        (
            "Execution",
            {
                "fields": [
                    "node",
                    "pid",
                    "task_id",
                    "flower",
                    "lease_key",
                    "fencing_token",
                    "created_at",
                    "started_at",
                    "finished_at",
                    "lag",
                    "duration",
                    "duplicate_deliveries",
                    "result",
                ]
            },
        ),
        ("Error", {"fields": ["error", "traceback_block"]}),
        ("Log", {"fields": ["log_block"]}),
    ]

    @admin.display(description="job", ordering="job__name")
    def job_link(self, run: JobRun) -> SafeString:
        url = reverse("admin:jobs_job_change", args=[run.job_id])
        return format_html('<a href="{}">{}</a>', url, run.job.name)

    @admin.display(description="status", ordering="status")
    def status_badge(self, run: JobRun) -> SafeString | str:
        return status_badge(run.status)

    @admin.display(description="status (trigger)", ordering="status")
    def status_trigger(self, run: JobRun) -> SafeString:
        """The status, and under it how the run came (and which attempt, past the first)."""
        attempt = f", attempt {run.attempt}" if run.attempt > 1 else ""
        return format_html("{}<br>{}{}", status_badge(run.status), run.trigger, attempt)

    @admin.display(description="lag (start - slot)")
    def lag(self, run: JobRun) -> str | None:
        return _seconds(run.lag)

    @admin.display(description="duration")
    def duration(self, run: JobRun) -> str | None:
        return run_duration(run)

    @admin.display(description="Flower")
    def flower(self, run: JobRun) -> SafeString | str:
        url = serializers.flower_task_url(run)
        if url is None:
            return "-"
        return format_html('<a href="{}" target="_blank" rel="noopener">task</a>', url)

    @admin.display(description="traceback")
    def traceback_block(self, run: JobRun) -> SafeString | str:
        if not run.traceback:
            return "-"
        return format_html('<pre style="white-space: pre-wrap">{}</pre>', run.traceback)

    @admin.display(description="log")
    def log_block(self, run: JobRun) -> SafeString:
        """What the run's code logged and printed (jobs.runlog): the first page here, the rest
        (and a running run's new lines) fetched by the page's script from the API."""
        page = reading.page(run.pk)
        return format_html(
            '<pre id="run-log" class="run-log" data-url="{}" data-cursor="{}" data-finished="{}">'
            "{}</pre>"
            '<p class="help" id="run-log-state">{}</p>',
            reverse("api_run_log", args=[run.pk]),
            page.cursor,
            "true" if page.finished else "false",
            "\n".join(entry.text() for entry in page.entries),
            "" if page.entries or page.finished else "No line yet.",
        )


@admin.register(Lease)
class LeaseAdmin(ReadOnlyAdmin):
    list_display = [
        "key", "holder_tokens", "token", "acquired_at", "expires_at", "valid", "expires_in",
    ]  # fmt: skip
    search_fields = ["key", "holder"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Lease]:
        # Validity by the database clock, the only clock leases are judged by.
        live = ExpressionWrapper(LIVE_LEASE, output_field=BooleanField())
        remaining = ExpressionWrapper(F("expires_at") - Now(), output_field=DurationField())
        return super().get_queryset(request).annotate(is_live=live, remaining=remaining)

    @admin.display(description="holder", ordering="holder")
    def holder_tokens(self, lease: Lease) -> SafeString:
        """Wrapped between its node, pid and run only, as on the job list."""
        return holder_html(lease.holder)

    @admin.display(description="valid", boolean=True, ordering="is_live")
    def valid(self, lease: Lease) -> bool:
        return bool(getattr(lease, "is_live", False))

    @admin.display(description="expires in", ordering="remaining")
    def expires_in(self, lease: Lease) -> str:
        remaining = getattr(lease, "remaining", None)
        if remaining is None or remaining.total_seconds() <= 0:
            return "expired"
        return f"{remaining.total_seconds():.1f} s"


class LivenessFilter(admin.SimpleListFilter):
    """Alive, dead or stopped as the state column says (``with_liveness``), not the stored state,
    which still reads alive for a node that died without shutting down."""

    title = "state"
    parameter_name = "liveness"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(state.value, state.value) for state in Liveness]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset if value is None else queryset.filter(liveness=value)


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin):
    # Seven columns, so the leases a node holds stay in view at 1366 px (start: on its page).
    list_display = ["name", "host", "pid", "liveness", "heartbeat", "running_runs", "holds"]
    list_filter = [LivenessFilter]
    search_fields = ["name", "host"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Node]:
        """Each node with its heartbeat age (database clock), running runs and live leases."""
        running = (
            JobRun.objects.filter(status=RunStatus.RUNNING, node=OuterRef("name"))
            .order_by()
            .values("node")
            .annotate(n=Count("id"))
            .values("n")
        )
        # Holders are "<node>:<pid>:..." (jobs.guard.runner), so a node's leases share its prefix.
        held = Lease.objects.filter(
            LIVE_LEASE,
            holder__startswith=Concat(OuterRef("name"), Value(":"), output_field=CharField()),
        ).values("key")
        age = ExpressionWrapper(Now() - F("last_heartbeat"), output_field=DurationField())
        return with_liveness(
            super()
            .get_queryset(request)
            .annotate(age=age, running=Subquery(running[:1]), holding=ArraySubquery(held))
        )

    @admin.display(description="state", ordering="liveness")
    def liveness(self, node: Node) -> SafeString:
        """alive / dead (3 missed heartbeats: jobs.continuous.nodes) / stopped (shut down)."""
        state = getattr(node, "liveness", Liveness.DEAD)
        if state == Liveness.STOPPED:
            return format_html('<span style="color: #777">{}</span>', "stopped")
        if state == Liveness.ALIVE:
            return format_html('<strong style="color: #2e7d32">{}</strong>', "alive")
        return format_html('<strong style="color: #c62828">{}</strong>', "dead")

    @admin.display(description="last heartbeat (age)", ordering="last_heartbeat")
    def heartbeat(self, node: Node) -> SafeString:
        age = getattr(node, "age", None)
        ago = "" if age is None else f"{age.total_seconds():.0f} s ago"
        return format_html("{}<br>{}", timestamps.display(node.last_heartbeat), ago)

    @admin.display(description="running runs")
    def running_runs(self, node: Node) -> int:
        return getattr(node, "running", None) or 0

    @admin.display(description="holds leases")
    def holds(self, node: Node) -> str:
        return ", ".join(sorted(getattr(node, "holding", None) or [])) or "-"


class DeletedOneByOne(admin.ModelAdmin):
    """Rows whose ``delete_model`` goes through an audited service: "delete selected" deletes
    each of them that way too, never in one bulk DELETE."""

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for obj in queryset:
            self.delete_model(request, obj)


@admin.register(ApiToken)
class ApiTokenAdmin(DeletedOneByOne):
    """Tokens are created by ``manage.py apitoken create`` (the secret is shown once there);
    here they can be seen and revoked (deleted, through ``jobs.web.tokens``: audited)."""

    list_display = readonly_fields = (
        "name",
        "prefix",
        "read_only",
        "created_by",
        "created_at",
        "expires_at",
        "last_used_at",
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def delete_model(self, request: HttpRequest, obj: ApiToken) -> None:
        tokens.revoke(obj.name, actor=_actor(request))


@admin.register(Blackout)
class BlackoutAdmin(DeletedOneByOne):
    """Blackout windows: added and removed here (audited, through the services); a window is
    not edited in place, so what a slot was skipped for stays what the trail says."""

    list_display = ("name", "scope", "starts_at", "ends_at", "why")
    list_filter = ("job",)
    fields = ("name", "job", "starts_at", "ends_at", "description")

    @admin.display(description="job")
    def scope(self, window: Blackout) -> str:
        return window.job.name if window.job else "every job"

    @admin.display(description="description")
    def why(self, window: Blackout) -> str:
        # Cut: a long one would widen the list past the page; the window's own page has it all.
        return text.cut(window.description)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def save_model(self, request: HttpRequest, obj: Blackout, form: Any, change: bool) -> None:
        saved = services.add_blackout(
            obj.name,
            obj.starts_at,
            obj.ends_at,
            actor=_actor(request),
            job_name=None if obj.job is None else obj.job.name,
            description=obj.description,
        )
        obj.pk = saved.pk

    def delete_model(self, request: HttpRequest, obj: Blackout) -> None:
        services.remove_blackout(obj.name, actor=_actor(request))


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """The audit trail, overall (a job's own entries: the link on its page). Nobody edits or
    deletes entries here."""

    # Six columns that fit beside the filters at 1366 px: the actor says who (user:, token:,
    # cli:, code:); through which door, the source filter and the entry's page.
    list_display = ["at", "actor", "action", "job_link", "target", "changes"]
    list_filter = ["action", "source", "actor", "job_name"]
    search_fields = ["actor", "job_name", "target"]
    show_full_result_count = False
    fields = readonly_fields = (
        "at",
        "actor",
        "source",
        "action",
        "job_link",
        "target",
        "before_block",
        "after_block",
    )

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        return {}  # not even "delete selected"

    @admin.display(description="job", ordering="job_name")
    def job_link(self, entry: AuditEntry) -> SafeString | str:
        if entry.job_id is None:
            return entry.job_name or "-"  # deleted since, or not about a job
        url = reverse("admin:jobs_job_change", args=[entry.job_id])
        return format_html('<a href="{}">{}</a>', url, entry.job_name)

    @admin.display(description="before → after")
    def changes(self, entry: AuditEntry) -> str:
        return audit_changes(entry)

    @admin.display(description="before")
    def before_block(self, entry: AuditEntry) -> SafeString:
        return _json_block(entry.before)

    @admin.display(description="after")
    def after_block(self, entry: AuditEntry) -> SafeString:
        return _json_block(entry.after)


def _json_block(value: Any) -> SafeString:
    # A long value without a space (a path, a token) wraps too, rather than past the screen.
    shown = json.dumps(value, indent=2, ensure_ascii=False)
    return format_html(
        '<pre style="white-space: pre-wrap; overflow-wrap: anywhere">{}</pre>', shown
    )


# --- alerts ---------------------------------------------------------------------------------


# A delivery's progress, as its incident's page and the outbox list both show it.
DELIVERY_PROGRESS = ("event", "channel", "state", "attempts", "next_attempt", "delivered_at")


class DeliveryProgress:
    """The columns of ``DELIVERY_PROGRESS`` that are no model field."""

    @admin.display(description="next attempt", ordering="next_attempt_at")
    def next_attempt(self, delivery: AlertDelivery) -> str:
        """Only a pending delivery has one: a delivered, dropped or given-up row is never tried
        again, whatever its ``next_attempt_at`` column last held."""
        pending = delivery.state == DeliveryState.PENDING
        return timestamps.display(delivery.next_attempt_at if pending else None)


class DeliveryInline(DeliveryProgress, ReadOnlyInline):
    model = AlertDelivery
    fields = readonly_fields = (*DELIVERY_PROGRESS, "last_error")


@admin.register(Incident)
class IncidentAdmin(ReadOnlyAdmin):
    """Incidents are opened and resolved by the cluster (``jobs.alerts``)."""

    list_display = ["id", "job", "kind", "reason", "opened_at", "resolved_at", "bad_runs"]
    list_filter = ["kind", "reason", ("resolved_at", admin.EmptyFieldListFilter)]
    search_fields = ["job__name", "summary"]
    list_select_related = ["job"]
    inlines = [DeliveryInline]


@admin.register(AlertDelivery)
class AlertDeliveryAdmin(DeliveryProgress, ReadOnlyAdmin):
    """The outbox: each notification, its attempts and last error."""

    list_display = ["id", "incident", *DELIVERY_PROGRESS]
    fields = readonly_fields = ("incident", "created_at", *DELIVERY_PROGRESS, "last_error")
    list_filter = ["state", "channel", "event"]
    list_select_related = ["incident__job"]
