"""The app's tables: job definitions, run records, leases and nodes.

The schedule of a periodic job lives in django-celery-beat's schedule models (interval, crontab
with time zone, clocked) through ``Job.periodic_task``; ``jobs.beat.entries`` keeps that row in step
with the job, so there is one place for each fact.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, ClassVar

from celery.app.task import Context
from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator, MaxValueValidator, MinValueValidator
from django.db import DEFAULT_DB_ALIAS, IntegrityError, models, transaction
from django.db.models import Q
from django.db.models.base import ModelState
from django.db.models.functions import Now
from django.db.models.signals import post_init, pre_init
from django_celery_beat.models import PeriodicTask

from jobs.alerts.channels import registered
from jobs.alerts.channels.base import MAX_NAME_LENGTH
from jobs.exceptions import NameReadsLikeAnother
from jobs.schedule import calendars
from jobs.values import jsonvalues, text, timestamps
from jobs.values.names import (
    JOB_NAME_VALIDATORS,
    MAX_JOB_NAME,
    no_control_characters,
    no_invisible_characters,
    no_slash,
    not_padded,
    printable_name_check,
    reads_like,
    stored_skeleton,
    visible_name_check,
)


class JobKind(models.TextChoices):
    PERIODIC = "periodic", "periodic"
    CONTINUOUS = "continuous", "continuous"
    # No schedule of its own: runs after its upstreams, or when run now / through the API.
    TRIGGERED = "triggered", "triggered"


class Overlap(models.TextChoices):
    SKIP = "skip", "skip: record the slot as skipped"
    WAIT = "wait", "wait: retry until the lease frees, within the start deadline"
    ALLOW = "allow", "allow: no singleton, runs may overlap"
    REPLACE = "replace", "replace: ask the running holder to stop, then take over"


class CatchUp(models.TextChoices):
    LATEST = "latest", "latest: run the newest missed slot once"
    NONE = "none", "none: record missed slots, run nothing late"


class OnLost(models.TextChoices):
    ABANDON = "abandon", "abandon: record lost, do not re-run (at most once)"
    RETRY = "retry", "retry: re-run once with a new token (at least once)"


def alert_channel_choices() -> list[tuple[str, str]]:
    """Where a job's incidents are notified: every channel the cluster configures, one channel
    of the registry (jobs.alerts.channels), or none. A callable, so that a channel added is in
    the choices without a migration."""
    return [
        ("default", "default: every channel the cluster configures"),
        *((name, channel.label) for name, channel in registered().items()),
        ("none", "none: never alert"),
    ]


def alert_channel_values() -> list[str]:
    return [value for value, _ in alert_channel_choices()]


class RunStatus(models.TextChoices):
    SCHEDULED = "scheduled"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    MISSED = "missed"
    LOST = "lost"
    CANCELLED = "cancelled"


TERMINAL_STATUSES = frozenset(
    {
        RunStatus.SUCCEEDED,
        RunStatus.FAILED,
        RunStatus.SKIPPED,
        RunStatus.MISSED,
        RunStatus.LOST,
        RunStatus.CANCELLED,
    }
)
# The outcomes other than success, in a fixed order (an index condition names them).
BAD_OUTCOMES = [
    str(status) for status in RunStatus if status in TERMINAL_STATUSES - {RunStatus.SUCCEEDED}
]


class Trigger(models.TextChoices):
    SCHEDULED = "scheduled"
    MANUAL = "manual"
    API = "api"
    CONTINUOUS = "continuous"
    RETRY = "retry"
    # ``.delay()`` / ``.apply_async()`` of a guarded task (jobs.calls), outside the schedule.
    CALL = "call"
    # A past slot that had no run, made by ``jobs backfill`` (jobs.workflow.backfill); one per slot,
    # as a scheduled run.
    BACKFILL = "backfill"
    # The run a job gets when its upstreams succeeded for a slot (jobs.workflow.dependencies); one
    # per job and upstream slot, its scheduled_for that slot.
    UPSTREAM = "upstream"


# The triggers whose runs stand for a slot of the schedule: at most one run per job and slot.
SLOT_TRIGGERS = (Trigger.SCHEDULED, Trigger.BACKFILL)


# The reasons a job may be alerted for (the cluster's own, no_beat and no_node, are not a job's).
JOB_ALERT_REASONS = ("failed", "missed", "lost", "running_long", "too_short", "overdue")


def validate_alert_reasons(value: object) -> None:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValidationError('A list of reasons, e.g. ["failed", "lost"].')
    unknown = sorted(set(value) - set(JOB_ALERT_REASONS))
    if unknown:
        renamed = " (stuck is now running_long)" if "stuck" in unknown else ""
        raise ValidationError(
            f"Unknown reason(s) {', '.join(unknown)}: choose from "
            f"{', '.join(JOB_ALERT_REASONS)}{renamed}."
        )
    if len(set(value)) != len(value):
        raise ValidationError("Each reason at most once.")


# Celery's own message headers and request fields (as ``Context`` tells custom headers apart): a
# job's header named like one would replace it in the message (``task``: another task would run,
# unguarded) or on the task's request.
CELERY_HEADERS = frozenset(
    {*vars(Context), "lang", "task", "argsrepr", "kwargsrepr", "compression"}
)


def validate_headers(value: object) -> None:
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        raise ValidationError('A JSON object of message headers, e.g. {"tenant": "acme"}.')
    taken = sorted(CELERY_HEADERS.intersection(value))
    if taken:
        raise ValidationError(
            f"{', '.join(map(repr, taken))}: Celery's own message header(s), not a job's."
        )
    try:
        jsonvalues.check_storable(value)
    except ValueError as exc:
        raise ValidationError(f"Cannot be stored: {exc}.") from None


# The most runs of one job (per lock key) at once: each is a lease row that a claim may try.
MAX_CONCURRENCY = 100
# The longest lease ttl, a day. A live holder renews its lease every ttl/3 however long it runs,
# so a longer ttl buys nothing; it only lengthens how long a holder that died keeps the job
# locked (a lease of 68 years would be a lock nobody can take back but by hand).
MAX_LEASE_TTL = 86_400


class Configured(models.TextChoices):
    """Whether a job is declared in Celery's configuration (``jobs.beat.configured``)."""

    NO = "", "no"
    DECLARED = "declared", "declared in Celery's configuration"
    REMOVED = "removed", "removed from Celery's configuration"


def _skeleton_field() -> models.TextField[str, str]:
    return models.TextField(
        editable=False,
        help_text="How the name reads (jobs.names.skeleton): unique, so no two names read alike.",
    )


class DistinctName:
    """For a model whose ``name`` people read: no other row's name reads like it. Its
    ``name_skeleton`` is the name's skeleton (``jobs.values.names.stored_skeleton``), written with
    the name on every save and unique in the database (the model's ``<kind>_name_reads_alike``
    constraint), so of two look-alikes saved at once the second is refused, naming the first."""

    what: ClassVar[str]
    name: str
    name_skeleton: str
    pk: Any

    def validate_constraints(self, exclude: Any = None) -> None:
        # The stored skeleton is written by save(): here, the name's is computed and the other
        # name said, rather than the constraint's message about a field nobody typed.
        super().validate_constraints({*(exclude or ()), "name_skeleton"})  # type: ignore[misc]
        if exclude is None or "name" not in exclude:
            other = self._reads_like()
            if other is not None and other != self.name:
                raise ValidationError(
                    {"name": reads_like(self.what, self.name, other)},
                    code="name_reads_like_another",
                )

    def save(self, *args: Any, **kwargs: Any) -> None:
        update_fields = kwargs.get("update_fields")
        if update_fields is not None and "name" not in update_fields:
            super().save(*args, **kwargs)  # type: ignore[misc]
            return
        self.name_skeleton = stored_skeleton(self.name)
        if update_fields is not None:
            kwargs["update_fields"] = [*update_fields, "name_skeleton"]
        try:
            # A savepoint: after a refusal the caller's transaction can still say whose name.
            with transaction.atomic(using=kwargs.get("using")):
                super().save(*args, **kwargs)  # type: ignore[misc]
        except IntegrityError as exc:
            # A unique violation (SQLSTATE 23505; SQLite tells none) may be the skeleton's.
            unique = getattr(exc.__cause__, "sqlstate", None) in (None, "23505")
            other = self._reads_like() if unique else None
            if other is None:
                raise
            message = reads_like(self.what, self.name, other)
            raise NameReadsLikeAnother({"name": [message]}) from exc

    def _reads_like(self) -> str | None:
        """The name of another row whose name reads like this one's, if any."""
        manager = type(self)._default_manager  # type: ignore[attr-defined]
        rows = manager.filter(name_skeleton=stored_skeleton(self.name))
        if self.pk is not None:
            rows = rows.exclude(pk=self.pk)
        return rows.order_by("pk").values_list("name", flat=True).first()


# A pause reason is one line people read in the job list: a few hundred characters.
MAX_PAUSE_REASON = 300


class Job(DistinctName, models.Model):
    what = "job"
    name = models.CharField(
        max_length=MAX_JOB_NAME,
        unique=True,
        validators=JOB_NAME_VALIDATORS,
        help_text="Unique name of this job, e.g. nightly-report.",
    )
    name_skeleton = _skeleton_field()
    task = models.CharField(
        max_length=200,
        help_text="The registered job function this job runs (see `manage.py jobs tasks`).",
    )
    kind = models.CharField(max_length=16, choices=JobKind.choices, default=JobKind.PERIODIC)
    enabled = models.BooleanField(default=True, help_text="Paused jobs are not scheduled.")
    # Who paused the job, why and until when (jobs.services.set_enabled); cleared on resume.
    # A pause with an end is resumed by the first beat to see it pass (jobs.beat.pause_ends).
    paused_by = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_default="",  # rows written in SQL (adoption's functions) get it too
        editable=False,
        help_text="Who paused it (as the audit trail names actors).",
    )
    pause_reason = models.CharField(
        max_length=MAX_PAUSE_REASON,
        blank=True,
        default="",
        db_default="",
        validators=[no_control_characters("A pause reason")],
        help_text="Why it is paused.",
    )
    paused_until = models.DateTimeField(
        null=True, blank=True, help_text="When it resumes by itself (empty: when resumed)."
    )
    periodic_task = models.OneToOneField(
        PeriodicTask,
        null=True,
        blank=True,
        editable=False,
        on_delete=models.PROTECT,
        related_name="job",
        help_text="The beat entry carrying this job's schedule (periodic jobs only).",
    )
    args = models.JSONField(
        default=list, blank=True, help_text="Positional arguments, a JSON list."
    )
    kwargs = models.JSONField(
        default=dict, blank=True, help_text="Keyword arguments, a JSON object."
    )
    overlap = models.CharField(
        max_length=16,
        choices=Overlap.choices,
        default=Overlap.SKIP,
        help_text="What happens when a slot comes while the previous run still holds the lease.",
    )
    start_deadline = models.PositiveIntegerField(
        default=300,
        validators=[MinValueValidator(1)],
        help_text="Seconds after its slot within which a run must start, else it is missed.",
    )
    catch_up = models.CharField(
        max_length=16,
        choices=CatchUp.choices,
        default=CatchUp.LATEST,
        help_text="What to do with slots that passed while every beat was down.",
    )
    on_lost = models.CharField(
        max_length=16,
        choices=OnLost.choices,
        default=OnLost.ABANDON,
        help_text="What to do when the node running this job dies mid-run.",
    )
    max_retries = models.PositiveSmallIntegerField(
        default=0,
        validators=[MaxValueValidator(100)],
        help_text="Re-runs after an exception, with exponential backoff and jitter.",
    )
    retry_backoff = models.PositiveIntegerField(
        default=10,
        validators=[MinValueValidator(1)],
        help_text="Base delay in seconds before the first retry; doubles each time.",
    )
    soft_time_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Seconds after which ctx.stopping is set and the job is asked to finish.",
    )
    time_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Seconds after which the run is killed.",
    )
    lease_ttl = models.PositiveIntegerField(
        default=30,
        validators=[MinValueValidator(3), MaxValueValidator(MAX_LEASE_TTL)],
        help_text="Seconds a lease stays valid without renewal; renewed every ttl/3.",
    )
    min_hold = models.PositiveIntegerField(
        default=0,
        help_text="Seconds the lease stays held after the run starts even if it ends sooner, "
        "so a fast job cannot run twice for one slot on nodes with skewed clocks.",
    )
    queue = models.CharField(
        max_length=100,
        default="default",
        validators=[no_control_characters("A queue name"), no_invisible_characters("A queue name")],
        help_text="Celery queue.",
    )
    # 0-9, 9 first, whichever the broker: the range both honour alike (Celery's Redis transport
    # has 10 priority steps, lowest first; RabbitMQ takes 0-255, highest first, up to a queue's
    # x-max-priority): jobs.broker.messages.wire_priority maps it for each.
    priority = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MaxValueValidator(9)],
        help_text="Celery message priority, 0-9.",
    )
    # Concurrency cap: N leases per lock key instead of one (jobs.guard.lease.slot_keys), each
    # holder fenced by its own token.
    max_concurrency = models.PositiveSmallIntegerField(
        default=1,
        db_default=1,  # rows written in SQL (adoption's functions) get it too
        validators=[MinValueValidator(1), MaxValueValidator(MAX_CONCURRENCY)],
        help_text="How many runs of this job (per lock key) may run at once; 1: a singleton.",
    )
    # Rate limit: at most rate_limit_runs starts in any rate_limit_period seconds, counted at the
    # claim with rate_limit_runs leases named rate:NAME#i, each held for the period (migration
    # 0020); a run over it is recorded skipped.
    rate_limit_runs = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_CONCURRENCY)],
        help_text="At most this many runs start per rate limit period (empty: no limit); a run "
        "over it is recorded skipped.",
    )
    rate_limit_period = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="The period of the rate limit, in seconds.",
    )
    # Calendars (jobs.schedule.calendars): slots on weekends or holidays are recorded skipped;
    # none is scheduled outside the active period. Blackout windows are rows of their own.
    business_days_only = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Skip the slots that fall on a Saturday or Sunday (in the job's time zone).",
    )
    holiday_calendar = models.CharField(
        max_length=16,
        blank=True,
        default="",
        db_default="",
        help_text="Skip the slots on this country's (or region's) public holidays, e.g. US, "
        "DE-BY, GB-ENG (the holidays library); empty: none.",
    )
    active_from = models.DateTimeField(
        null=True, blank=True, help_text="No slot before then (empty: from its creation)."
    )
    active_until = models.DateTimeField(
        null=True, blank=True, help_text="No slot after then (empty: no end)."
    )
    # Back-pressure (jobs.beat.coalescing): a slot is recorded skipped, not queued, while the
    # job's previous run still waits in the queue.
    coalesce = models.BooleanField(
        default=False,
        db_default=False,  # rows written in SQL (adoption's functions) get it too
        help_text="Skip a slot while this job's previous run still waits in its queue.",
    )
    # Alerts: read by the database functions that open incidents (jobs/sql/alerts.sql).
    alert_channels = models.CharField(
        max_length=16,
        default="default",
        choices=alert_channel_choices,
        help_text="Where this job's incidents are notified.",
    )
    alert_reasons = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_alert_reasons],
        help_text="The reasons alerted for (failed, missed, lost, running_long, too_short, "
        "overdue); empty: all.",
    )
    alerts_muted_until = models.DateTimeField(
        null=True,
        blank=True,
        help_text="No notification for incidents opened before then (they still show).",
    )
    # Durations (jobs.alerts.baseline): how a run is judged running long or too short.
    max_duration = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Seconds after which a run is running long, whatever its baseline or time "
        "limit (empty: judged by those).",
    )
    long_run_factor = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1.1), MaxValueValidator(100.0)],
        help_text="A run is running long past this many times the p95 of its last successful "
        "durations (empty: 3).",
    )
    min_duration = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Seconds under which a success is too short: the run that did nothing "
        "(empty: only its baseline judges).",
    )
    baseline_alerts = models.BooleanField(
        default=True,
        db_default=True,  # rows written in SQL (adoption's functions) get it too
        help_text="Judge runs against the job's duration baseline (running long past the long "
        "run factor x its p95, too short under a tenth of its median). Off: only the maximum "
        "and minimum durations and the time limits apply.",
    )
    # Dependencies (jobs.workflow.dependencies): this job runs once for each slot all of these
    # succeeded.
    upstreams = models.ManyToManyField(
        "self",
        symmetrical=False,
        blank=True,
        related_name="downstreams",
        help_text="Jobs this one runs after: once per slot for which every one of them "
        "succeeded (its own schedule, if any, still applies).",
    )
    managed_by_code = models.BooleanField(
        default=False,
        editable=False,
        help_text="Declared with @job(..., every=/cron=) and not edited since: code changes apply.",
    )
    adopted = models.BooleanField(
        default=False,
        editable=False,
        help_text="Adopted from django-celery-beat: made by the beat from a PeriodicTask that no "
        "job owned. That row stays this job's beat entry, and edits of either reach the other.",
    )
    configured = models.CharField(
        max_length=16,
        choices=Configured.choices,
        blank=True,
        default=Configured.NO,
        db_default=Configured.NO,
        help_text="Declared in Celery's beat_schedule / CELERY_BEAT_SCHEDULE / "
        "add_periodic_task: its entry is kept in step with the code (jobs.beat.configured).",
    )
    description = models.TextField(
        blank=True,
        default="",
        validators=[MaxLengthValidator(text.MAX_DESCRIPTION)],
        help_text="What this job is for.",
    )
    # An adopted django-celery-beat row's headers: sent with every run's message, and a plain
    # task reads them on its request as under stock beat (registry.JobSpec.call).
    headers = models.JSONField(
        default=dict,
        db_default={},  # rows written in SQL get it too
        blank=True,
        validators=[validate_headers],
        help_text="Custom headers of every run's message, a JSON object (tasks read them on "
        "self.request).",
    )
    exchange = models.CharField(
        max_length=200,
        blank=True,
        default="",
        validators=[
            no_control_characters("An exchange name"),
            no_invisible_characters("An exchange name"),
        ],
        help_text="Celery exchange (blank: the queue's).",
    )
    routing_key = models.CharField(
        max_length=200,
        blank=True,
        default="",
        validators=[
            no_control_characters("A routing key"),
            no_invisible_characters("A routing key"),
        ],
        help_text="Celery routing key (blank: the queue's).",
    )
    # An adopted django-celery-beat row's absolute expires (jobs.beat.retiring): as under
    # stock beat, the expiry of every run's message and the end of the job's slots.
    expires_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="No slot from then on, and a run not started by then does not run (its "
        "message expires); the job is paused once it passed. Empty: never.",
    )
    # An adopted django-celery-beat row's one_off (jobs.beat.retiring); a clocked schedule is
    # once by itself.
    one_off = models.BooleanField(
        default=False,
        db_default=False,  # rows written in SQL get it too
        help_text="Run the first slot only, then pause (django-celery-beat's one_off).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=[JobKind.CONTINUOUS, JobKind.TRIGGERED])
                & Q(periodic_task__isnull=True)
                | Q(kind=JobKind.PERIODIC),
                name="continuous_job_has_no_beat_entry",
            ),
            models.CheckConstraint(
                condition=Q(rate_limit_runs__isnull=True, rate_limit_period__isnull=True)
                | Q(rate_limit_runs__isnull=False, rate_limit_period__isnull=False),
                name="rate_limit_has_runs_and_period",
            ),
            models.CheckConstraint(
                condition=Q(time_limit__isnull=True)
                | Q(soft_time_limit__isnull=True)
                | Q(soft_time_limit__lt=models.F("time_limit")),
                name="soft_time_limit_below_hard",
            ),
            models.CheckConstraint(
                condition=printable_name_check("name", slash=True), name="job_name_printable"
            ),
            models.CheckConstraint(condition=visible_name_check("name"), name="job_name_visible"),
            models.UniqueConstraint(fields=["name_skeleton"], name="job_name_reads_alike"),
        ]
        indexes = [
            # Maintenance looks for expired jobs every pass (jobs.beat.retiring): the few that
            # have an expiry, not every job.
            models.Index(
                fields=["expires_at"], condition=Q(expires_at__isnull=False), name="job_expires_at"
            ),
            # Every beat tick looks for pauses that ended (jobs.beat.pause_ends): the few paused
            # with an end, not every job.
            models.Index(
                fields=["paused_until"],
                condition=Q(paused_until__isnull=False),
                name="job_paused_until",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        # The check constraint soft_time_limit_below_hard holds it in the database too, but its
        # message names only itself; this one names the field.
        soft, hard = self.soft_time_limit, self.time_limit
        if soft is not None and hard is not None and soft >= hard:
            raise ValidationError(
                {"soft_time_limit": f"Must be below the time limit ({hard} s): the job is asked "
                 "to finish before it is killed."}
            )  # fmt: skip
        # ShedLock's rule: holding "at least" longer than "at most" would be self-contradictory.
        if self.min_hold > self.lease_ttl:
            raise ValidationError(
                {"min_hold": f"Must not exceed the lease ttl ({self.lease_ttl} s)."}
            )
        if self.holiday_calendar:
            try:
                calendars.parse_holiday_calendar(self.holiday_calendar)
            except ValueError as exc:
                raise ValidationError({"holiday_calendar": str(exc)}) from None
        if (
            self.min_duration is not None
            and self.max_duration is not None
            and self.min_duration >= self.max_duration
        ):
            raise ValidationError(
                {"min_duration": f"Must be below the maximum duration "
                 f"({self.max_duration} s): a run cannot be both too short and running long."}
            )  # fmt: skip
        if self.active_from and self.active_until and self.active_until <= self.active_from:
            raise ValidationError({"active_until": "Must be after active from."})
        if (self.rate_limit_runs is None) != (self.rate_limit_period is None):
            missing = "rate_limit_period" if self.rate_limit_period is None else "rate_limit_runs"
            raise ValidationError(
                {missing: "A rate limit needs both a number of runs and a period."}
            )
        if self.rate_limit_runs is not None and self.kind == JobKind.CONTINUOUS:
            raise ValidationError(
                {"rate_limit_runs": "A continuous job runs all the time: it has no rate limit."}
            )
        if self.max_concurrency is not None and self.max_concurrency > 1:
            if self.kind == JobKind.CONTINUOUS:
                raise ValidationError(
                    {"max_concurrency": "A continuous job runs on exactly one node: it must be 1."}
                )
            if self.overlap not in (Overlap.SKIP, Overlap.WAIT):
                raise ValidationError(
                    {"max_concurrency": "Above 1 it needs overlap skip or wait (allow takes no "
                     "lease to count; replace would not know which run to stop)."}
                )  # fmt: skip

    @property
    def lock_key(self) -> str:
        """The default lease key: one per job."""
        return f"job:{self.name}"

    def expired(self, at: datetime) -> bool:
        """Whether the job has expired by ``at``: no slot then, nor any run started."""
        return self.expires_at is not None and at >= self.expires_at


def job_from_columns(names: Sequence[str], values: Sequence[Any]) -> Job:
    """The ``Job`` that ``Job.from_db`` builds from these columns of the default database (the
    other fields deferred), in a fifth of its time (~3 µs against ~17 µs through
    ``Model.__init__``), for the beat's bursts and each run's claim: the loaded fields in its
    ``__dict__``, the deferred ones absent, its state loaded from the database. ``from_db``
    itself whenever a receiver of Django's init signals would miss its call."""
    if pre_init.has_listeners(Job) or post_init.has_listeners(Job):
        order = {f.attname: i for i, f in enumerate(Job._meta.concrete_fields)}
        by_order = sorted(zip(names, values, strict=True), key=lambda item: order[item[0]])
        return Job.from_db(
            DEFAULT_DB_ALIAS, [name for name, _ in by_order], [value for _, value in by_order]
        )
    job = Job.__new__(Job)
    job.__dict__.update(zip(names, values, strict=True))
    state = job._state = ModelState()
    state.adding, state.db = False, DEFAULT_DB_ALIAS
    return job


class JobRun(models.Model):
    # No index of its own: jobrun_job_slot (job, -scheduled_for) serves the foreign key, and
    # every index is one more entry that each claim and finish (not HOT updates) must write.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="runs", db_index=False)
    scheduled_for = models.DateTimeField(help_text="The slot (UTC) or the trigger time.")
    # Database defaults, because beats insert runs in bulk with raw SQL (jobs/guard/run_records.py).
    status = models.CharField(
        max_length=16, choices=RunStatus.choices, db_default=RunStatus.SCHEDULED
    )
    trigger = models.CharField(max_length=16, choices=Trigger.choices, db_default=Trigger.SCHEDULED)
    attempt = models.PositiveSmallIntegerField(db_default=1)
    fencing_token = models.BigIntegerField(null=True, blank=True)
    lease_key = models.CharField(max_length=255, blank=True, db_default="")
    node = models.CharField(max_length=255, blank=True, db_default="")
    pid = models.PositiveIntegerField(null=True, blank=True)
    task_id = models.CharField(
        max_length=255, blank=True, db_default="", help_text="Celery task id."
    )
    created_at = models.DateTimeField(db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, db_default="")
    traceback = models.TextField(blank=True, db_default="")
    result = models.JSONField(null=True, blank=True)
    retry_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        db_index=False,  # jobrun_retry_of: only the few runs that are retries
        on_delete=models.SET_NULL,
        related_name="retries",
        help_text="The run this one retries (after an exception or a lost node).",
    )
    dispatched_at = models.DateTimeField(
        null=True, blank=True, help_text="When its message was last published."
    )
    duplicate_deliveries = models.PositiveIntegerField(
        db_default=0, help_text="Extra deliveries of this run's message, each a recorded no-op."
    )
    # The client's Idempotency-Key of an API trigger; "" for every other run.
    idempotency_key = models.CharField(
        max_length=200,
        blank=True,
        db_default="",
        help_text="The Idempotency-Key an API trigger carried: the same key never makes two runs.",
    )
    # What the request with that key asked (jobs.broker.dispatch.request_digest): the same key with
    # another request is refused rather than answered with this run. "" for every other run, and
    # for API triggers made before it was kept.
    request_digest = models.CharField(
        max_length=64,
        blank=True,
        db_default="",
        help_text="SHA-256 of the request an API trigger made (its kwargs).",
    )
    # A call's own arguments (jobs.calls, and its retries); NULL: the job's, as every other run.
    args = models.JSONField(
        null=True, blank=True, help_text="The arguments of this call (empty: the job's)."
    )
    kwargs = models.JSONField(
        null=True, blank=True, help_text="The keyword arguments of this call (empty: the job's)."
    )
    # The upstream run whose success made this run (trigger upstream; jobs.workflow.dependencies).
    upstream_run = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        db_index=False,  # jobrun_upstream_run: only the runs upstreams made
        on_delete=models.SET_NULL,
        related_name="downstream_runs",
        help_text="The upstream run whose success (or failure) made this one.",
    )
    # A backfill run waits unpublished until its job's previous backfill run ends
    # (jobs.workflow.backfill); its start deadline counts from this release, not from its (past)
    # slot.
    released_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When this backfill run was released to the queue (its start deadline counts "
        "from then).",
    )
    # Counted into RunRollup, so /metrics reads totals instead of every run.
    folded = models.BooleanField(
        db_default=False, editable=False, help_text="Counted into the metrics totals."
    )

    class Meta:
        ordering = ["-scheduled_for", "-id"]
        constraints = [
            # Guarantee 1: however many beats fire a slot (or backfills make it), only one run
            # record exists for it.
            models.UniqueConstraint(
                fields=["job", "scheduled_for"],
                condition=Q(trigger__in=SLOT_TRIGGERS),
                name="one_run_per_slot",
            ),
            # One run per job and upstream slot, however many upstream runs, retries and
            # redeliveries finish for it (jobs.workflow.dependencies).
            models.UniqueConstraint(
                fields=["job", "scheduled_for"],
                condition=Q(trigger=Trigger.UPSTREAM),
                name="one_run_per_upstream_slot",
            ),
            # The same Idempotency-Key twice (a client's retry) finds the first run (jobs.web.api).
            models.UniqueConstraint(
                fields=["job", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="one_run_per_idempotency_key",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "scheduled_for"], name="jobrun_status_slot"),
            models.Index(fields=["job", "-scheduled_for"], name="jobrun_job_slot"),
            # One job's failures, for the operator asking for them: without it a job with few
            # walks all its runs (1.5 s at 100k a job). Partial on the outcomes that are not a
            # success, so the claim and the finish of a run that succeeds, the most of them,
            # write no entry (scheduled and running runs are few: the status index finds them).
            models.Index(
                fields=["job", "status", "-scheduled_for"],
                condition=Q(status__in=BAD_OUTCOMES),
                name="jobrun_job_unsuccessful",
            ),
            models.Index(fields=["node", "-scheduled_for"], name="jobrun_node_slot"),
            models.Index(fields=["-scheduled_for"], name="jobrun_slot"),
            # The few runs not yet counted into RunRollup (jobs.upkeep.rollups.fold).
            models.Index(fields=["id"], condition=Q(folded=False), name="jobrun_unfolded"),
            # Backfill runs not yet ended, released ones apart, in slot order: what
            # jobs.workflow.backfill releases next and whether one is in flight. Empty unless a
            # backfill is under way.
            models.Index(
                fields=["job", "released_at", "scheduled_for"],
                condition=Q(trigger=Trigger.BACKFILL, status__in=["scheduled", "running"]),
                name="jobrun_backfill_pending",
            ),
            models.Index(
                fields=["upstream_run"],
                condition=Q(upstream_run__isnull=False),
                name="jobrun_upstream_run",
            ),
            # For ON DELETE SET NULL when retention deletes a retried run. Partial, so the
            # runs that are no retry (nearly all) cost it nothing when they are updated.
            models.Index(
                fields=["retry_of"], condition=Q(retry_of__isnull=False), name="jobrun_retry_of"
            ),
        ]

    def __str__(self) -> str:
        """The job's name and the slot, as pages title a run (select the job with it)."""
        return f"{self.job.name} @ {timestamps.display(self.scheduled_for)}"

    @property
    def duration(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()

    @property
    def lag(self) -> float | None:
        """Seconds from the slot to the start."""
        if self.started_at is None:
            return None
        return (self.started_at - self.scheduled_for).total_seconds()


class RunLogLine(models.Model):
    """One line of a run's own log (``jobs.runlog``): what its code logged or printed.

    ``seq`` numbers a run's lines from 1 in the order they were written, with no gap except
    where lines were cut (a run keeps its first and last lines, ``JOBS_RUN_LOG_MAX_LINES``): a
    reader tells how many were cut from the gap. The lines go with their run (``ON DELETE
    CASCADE`` in the database too, so any deletion of runs takes them)."""

    # The constraint is the migration's own (0039), with ON DELETE CASCADE: Django's would not
    # cascade in the database.
    run = models.ForeignKey(
        JobRun,
        on_delete=models.CASCADE,
        related_name="log_lines",
        db_index=False,
        db_constraint=False,
    )
    seq = models.BigIntegerField(help_text="The line's number in its run's log, from 1.")
    at = models.DateTimeField(help_text="When it was logged, by the worker's clock.")
    level = models.CharField(
        max_length=16, help_text="DEBUG to CRITICAL, or STDOUT / STDERR for what was printed."
    )
    message = models.TextField()

    class Meta:
        ordering = ["run", "seq"]
        constraints = [
            # Serves every read (a run's lines after a cursor) and makes a rewritten batch a no-op.
            models.UniqueConstraint(fields=["run", "seq"], name="one_log_line_per_seq"),
        ]

    def __str__(self) -> str:
        return f"{self.level} {self.message[:60]}"


# A lease is live while it expires after now, by the database clock (guarantee 2): the ORM's
# form of the rule every SQL statement asks through ``jobs.guard.lease.lease_live_pg``.
LIVE_LEASE = Q(expires_at__gt=Now())


class Lease(models.Model):
    """One row per lock key. Valid while ``expires_at > now()`` by the database clock.

    All reads and writes of this table that carry a guarantee are in ``jobs/guard/lease.py``.
    """

    key = models.CharField(max_length=255, primary_key=True)
    holder = models.CharField(max_length=255)
    token = models.BigIntegerField(help_text="Fencing token: grows on every acquisition.")
    acquired_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    stop_requested_by = models.CharField(
        max_length=255,
        blank=True,
        db_default="",
        help_text="The run that asked this holder to stop (overlap replace); the holder sees it "
        "at its next renewal. Cleared on every acquisition.",
    )

    class Meta:
        ordering = ["key"]

    def __str__(self) -> str:
        return f"{self.key} #{self.token} ({self.holder})"


class NodeState(models.TextChoices):
    ALIVE = "alive"
    STOPPED = "stopped"


class Node(models.Model):
    """One ``celery worker`` process tree, identified by its node name."""

    name = models.CharField(max_length=255, unique=True)
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    queues = models.JSONField(default=list)
    concurrency = models.PositiveIntegerField(default=1)
    version = models.CharField(max_length=64, blank=True)
    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.ALIVE)
    started_at = models.DateTimeField()
    last_heartbeat = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)
    # Each node judges the others by their own interval (jobs.continuous.nodes): a rolling change of
    # JOBS_NODE_HEARTBEAT must not make the nodes still on the old value look dead.
    heartbeat_interval = models.FloatField(
        default=5.0,
        help_text="Seconds between this node's heartbeats; it is dead after 3 missed ones.",
    )
    broker = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_default="",
        help_text="The broker this node consumes from, without credentials (jobs.broker_identity).",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


# --- operations: API tokens, beat heartbeats, run totals kept past retention ---------------


class ApiToken(DistinctName, models.Model):
    """A bearer token for the JSON API and ``/metrics``.

    Only the SHA-256 digest of the secret is stored; the secret is printed once, when the token
    is created (``manage.py apitoken create NAME``). Tokens are long random strings, so a fast
    hash is enough: there is nothing to brute-force.
    """

    what = "API token"
    name = models.CharField(
        max_length=100,
        unique=True,
        validators=[
            no_control_characters("A token name"),
            no_invisible_characters("A token name"),
            not_padded("A token name"),
        ],
        help_text="Who or what uses it.",
    )
    name_skeleton = _skeleton_field()
    prefix = models.CharField(
        max_length=16, editable=False, help_text="The token's first characters, to recognise it."
    )
    digest = models.CharField(max_length=64, unique=True, editable=False)
    read_only = models.BooleanField(
        default=False,
        help_text="Only reads (jobs, runs, /metrics): no trigger, pause, resume or edit.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Who made it, and when it stops working (by the database clock).
    created_by = models.CharField(
        max_length=255, blank=True, db_default="", editable=False, help_text="Who created it."
    )
    expires_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="Refused (401) from then on; none: never."
    )

    class Meta:
        ordering = ["name"]
        verbose_name = "API token"
        constraints = [
            models.CheckConstraint(
                condition=printable_name_check("name", slash=False), name="token_name_printable"
            ),
            models.CheckConstraint(condition=visible_name_check("name"), name="token_name_visible"),
            models.UniqueConstraint(fields=["name_skeleton"], name="token_name_reads_alike"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class BeatHeartbeat(models.Model):
    """One ``celery beat`` process as it last reported itself (``jobs.web.health``): liveness for
    ``/healthz`` and the dashboard, tick cost for ``/metrics``."""

    name = models.CharField(max_length=255, unique=True, help_text="host:pid")
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField(help_text="Database clock.")
    ticks = models.BigIntegerField(default=0, help_text="Ticks since the process started.")
    tick_seconds = models.FloatField(default=0.0, help_text="Time spent in those ticks.")
    max_tick_seconds = models.FloatField(default=0.0, help_text="The slowest tick.")
    configuration = models.CharField(
        max_length=64,
        blank=True,
        default="",
        db_default="",
        help_text="The fingerprint of the Celery configuration this beat holds.",
    )
    broker = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_default="",
        help_text="The broker this beat publishes to, without credentials (jobs.broker_identity).",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class CeleryConfiguration(models.Model):
    """A Celery configuration's schedule (``beat_schedule``) as a beat applied it: which one was
    applied last decides between beats of two releases (``jobs.beat.configured``)."""

    fingerprint = models.CharField(max_length=64, unique=True)
    entries = models.JSONField(default=list, help_text="The entries' names.")
    applied_at = models.DateTimeField(db_default=Now(), help_text="Database clock.")
    applied_by = models.CharField(max_length=255, blank=True, default="", help_text="The beat.")

    class Meta:
        ordering = ["-applied_at"]

    def __str__(self) -> str:
        return self.fingerprint[:12]


class RunRollup(models.Model):
    """Totals of finished runs per job and status (``jobs.upkeep.rollups.fold``): ``/metrics`` reads
    these plus the few runs not yet counted, and they outlive retention, so its counters and
    histograms never go backwards."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+")
    status = models.CharField(max_length=16, choices=RunStatus.choices)
    count = models.BigIntegerField(default=0)
    lag_sum = models.FloatField(default=0.0)
    # Cumulative counts per bucket of jobs.upkeep.rollups.LAG_BUCKETS, then +Inf.
    lag_buckets = models.JSONField(default=list)
    duration_sum = models.FloatField(default=0.0)
    duration_buckets = models.JSONField(default=list)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "status"], name="one_rollup_per_job_status")
        ]

    def __str__(self) -> str:
        return f"{self.job_id}/{self.status}: {self.count}"


# --- the schedule change log (incremental beat reloads) -------------------------------------


class ScheduleChange(models.Model):
    """One edit of a job or of the beat entry carrying its schedule, appended by database
    triggers (migration ``0005_schedule_change_log``), so bulk updates and raw SQL are logged
    too. Each beat reads the entries after the last one it saw and reloads only those jobs;
    maintenance prunes old entries. Ids are committed in order (see the trigger's lock)."""

    id = models.BigAutoField(primary_key=True)
    job_id = models.BigIntegerField(
        null=True, help_text="The job edited (it may have been deleted since)."
    )
    # A django-celery-beat row that no job owns was added or edited: beats adopt it.
    periodic_task_id = models.BigIntegerField(
        null=True, help_text="The PeriodicTask without a job that was added or edited."
    )
    changed_at = models.DateTimeField(db_default=Now(), help_text="Database clock.")

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"#{self.id}: job {self.job_id}"


# What showing a job reads with it: the schedule rows of its beat entry, and why no beat can
# schedule it (``select_related`` names).
JOB_DISPLAY_RELATED = (
    "periodic_task__interval",
    "periodic_task__crontab",
    "periodic_task__clocked",
    "periodic_task__solar",
    "schedule_error",
)


class Blackout(DistinctName, models.Model):
    """A freeze: the slots inside ``[starts_at, ends_at)`` of one job, or of every job, are
    recorded skipped with the window's name (checked by the insert of each slot:
    ``jobs.guard.run_records.blackout_of_pg``)."""

    what = "blackout window"
    name = models.CharField(
        max_length=100,
        unique=True,
        validators=[
            no_slash("A blackout window's name", "/api/blackouts/<name>"),
            no_control_characters("A blackout window's name"),
            no_invisible_characters("A blackout window's name"),
            not_padded("A blackout window's name"),
        ],
        help_text="Shown on every slot it skips, e.g. release-freeze.",
    )
    name_skeleton = _skeleton_field()
    job = models.ForeignKey(
        Job,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="blackouts",
        help_text="The job it freezes; empty: every job.",
    )
    starts_at = models.DateTimeField(help_text="The first instant frozen.")
    ends_at = models.DateTimeField(help_text="The first instant no longer frozen.")
    description = models.TextField(
        blank=True,
        default="",
        validators=[MaxLengthValidator(text.MAX_DESCRIPTION)],
        help_text="Why.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-starts_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(ends_at__gt=models.F("starts_at")), name="blackout_ends_after_start"
            ),
            models.CheckConstraint(
                condition=printable_name_check("name", slash=True), name="blackout_name_printable"
            ),
            models.CheckConstraint(
                condition=visible_name_check("name"), name="blackout_name_visible"
            ),
            models.UniqueConstraint(fields=["name_skeleton"], name="blackout_name_reads_alike"),
        ]
        indexes = [models.Index(fields=["ends_at"], name="blackout_ends_at")]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if self.starts_at and self.ends_at and self.ends_at <= self.starts_at:
            raise ValidationError({"ends_at": "Must be after the start."})


class ScheduleError(models.Model):
    """Why a beat cannot schedule a job (a schedule row no slot can be computed from).

    Written by the beats, one row per broken job, and deleted as soon as a beat reads the job
    again and can schedule it; the admin, CLI, API, ``/healthz`` and ``/metrics`` show it.
    """

    job = models.OneToOneField(
        Job, primary_key=True, on_delete=models.CASCADE, related_name="schedule_error"
    )
    error = models.TextField()
    detected_at = models.DateTimeField(db_default=Now(), help_text="Database clock.")
    beat = models.CharField(max_length=255, blank=True, db_default="", help_text="Who saw it.")

    def __str__(self) -> str:
        return f"{self.job_id}: {self.error}"


# --- the audit trail ------------------------------------------------------------------------


class AuditAction(models.TextChoices):
    ADD = "add"
    EDIT = "edit"
    DELETE = "delete"
    PAUSE = "pause"
    RESUME = "resume"
    RUN_NOW = "run_now"
    BACKFILL = "backfill"
    BLACKOUT_ADD = "blackout_add"
    BLACKOUT_REMOVE = "blackout_remove"
    RELEASE_LEASE = "release_lease"
    PRUNE = "prune"
    TOKEN_CREATE = "token_create"
    TOKEN_REVOKE = "token_revoke"
    CANCEL = "cancel"


class AuditSource(models.TextChoices):
    ADMIN = "admin", "admin"
    API = "api", "API"
    CLI = "cli", "CLI"
    CODE = "code", "code"
    CELERY = "celery", "Celery control"


class AuditEntry(models.Model):
    """One operator action: who, when, what, on which job (or lease, or token), and the values
    before and after. Written by ``jobs.audit.record`` in the transaction of the change itself,
    so an entry exists exactly when the change was committed; never edited afterwards."""

    id = models.BigAutoField(primary_key=True)
    at = models.DateTimeField(db_default=Now(), help_text="Database clock.")
    actor = models.CharField(
        max_length=255, help_text="user:NAME, token:NAME, cli:OS-USER or code:WHAT."
    )
    source = models.CharField(max_length=16, choices=AuditSource.choices)
    action = models.CharField(max_length=16, choices=AuditAction.choices)
    # The job's name is kept as text too, so its entries still say which job after a deletion.
    job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    job_name = models.CharField(max_length=190, blank=True, db_default="")
    target = models.CharField(
        max_length=255, blank=True, db_default="", help_text="The lease key or token name acted on."
    )
    before = models.JSONField(null=True, blank=True, help_text="The changed values before.")
    after = models.JSONField(null=True, blank=True, help_text="The changed values after.")

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"
        indexes = [
            models.Index(fields=["-at", "-id"], name="audit_at"),
            models.Index(fields=["job", "-at", "-id"], name="audit_job_at"),
            models.Index(fields=["job_name", "-at", "-id"], name="audit_job_name_at"),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.job_name or self.target} by {self.actor}"


# --- alerts: incidents and the outbox of their notifications --------------------------------


class IncidentKind(models.TextChoices):
    FAILING = "failing", "failing: runs ending failed, missed or lost"
    RUNNING_LONG = "running_long", "running long: a run past its maximum, time limit or baseline"
    TOO_SHORT = "too_short", "too short: a success far faster than its baseline or minimum"
    # Before migration 0039 "running long" was recorded as "stuck": migrated there, still read
    # (a process not yet upgraded may record one), and resolved as running_long is.
    STUCK = "stuck", "running long (recorded as stuck)"
    OVERDUE = "overdue", "overdue: no successful run within its expected window"
    NO_BEAT = "no_beat", "no live beat"
    NO_NODE = "no_node", "no live node"


class AlertReason(models.TextChoices):
    """What opened an incident; a job may choose the reasons it is alerted for."""

    FAILED = "failed"
    MISSED = "missed"
    LOST = "lost"
    RUNNING_LONG = "running_long"
    TOO_SHORT = "too_short"
    STUCK = "stuck", "Running long (recorded as stuck)"
    OVERDUE = "overdue"
    NO_BEAT = "no_beat"
    NO_NODE = "no_node"


class Incident(models.Model):
    """A period during which a job (or, with no job, the cluster) is unhealthy.

    Opened and resolved only by the PL/pgSQL functions of ``jobs/sql/alerts.sql``
    (``jobs_open_incident``, ``jobs_resolve_incidents``), called by a trigger on run outcomes and
    by the checks of ``jobs.alerts.detect``; the partial unique constraint lets one incident per
    (job, kind) be open, so however many processes see a failure, it is one incident.
    """

    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.CASCADE, related_name="incidents"
    )
    kind = models.CharField(max_length=16, choices=IncidentKind.choices)
    reason = models.CharField(
        max_length=16, choices=AlertReason.choices, help_text="What opened it."
    )
    summary = models.TextField(blank=True, db_default="", help_text="Why, in words.")
    opened_at = models.DateTimeField(db_default=Now(), help_text="Database clock.")
    resolved_at = models.DateTimeField(null=True, blank=True, help_text="Database clock.")
    # Run ids, not foreign keys: retention may delete the runs, the incident stays.
    first_run_id = models.BigIntegerField(null=True, blank=True)
    last_run_id = models.BigIntegerField(null=True, blank=True)
    resolved_by_run_id = models.BigIntegerField(null=True, blank=True)
    bad_runs = models.PositiveIntegerField(db_default=1, help_text="Bad runs it covers.")

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [
            # One open incident per job and kind (cluster-wide: job NULL, counted as one value).
            models.UniqueConstraint(
                fields=["job", "kind"],
                condition=Q(resolved_at__isnull=True),
                nulls_distinct=False,
                name="one_open_incident_per_job_kind",
            )
        ]

    def __str__(self) -> str:
        """As its page is titled and the outbox lists it (select the job with it)."""
        about = "the cluster" if self.job is None else self.job.name
        return f"{self.kind} of {about} since {timestamps.display(self.opened_at)}"

    @property
    def bad_runs_words(self) -> str:
        return f"{self.bad_runs} bad run{'' if self.bad_runs == 1 else 's'}"

    @property
    def is_open(self) -> bool:
        return self.resolved_at is None


class AlertEvent(models.TextChoices):
    OPENED = "opened"
    RESOLVED = "resolved"


def channel_choices() -> list[tuple[str, str]]:
    """The channels of the registry (jobs.alerts.channels) an outbox row may be for."""
    return [(name, name.title()) for name in registered()]


class DeliveryState(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed", "failed: gave up"
    DROPPED = "dropped", "dropped: channel not configured"


class AlertDelivery(models.Model):
    """The outbox: one notification of one incident event to one channel.

    Written in the transaction that opens or resolves the incident, so a notification exists
    exactly when the incident's change was committed; ``jobs.alerts.sender`` delivers it (at
    least once) and keeps its attempts and last error here.
    """

    id = models.BigAutoField(primary_key=True)
    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=16, choices=AlertEvent.choices)
    channel = models.CharField(max_length=MAX_NAME_LENGTH, choices=channel_choices)
    state = models.CharField(
        max_length=16, choices=DeliveryState.choices, db_default=DeliveryState.PENDING
    )
    created_at = models.DateTimeField(db_default=Now())
    next_attempt_at = models.DateTimeField(db_default=Now())
    attempts = models.PositiveIntegerField(db_default=0)
    last_error = models.TextField(blank=True, db_default="")
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "alert deliveries"
        constraints = [
            models.UniqueConstraint(
                fields=["incident", "event", "channel"], name="one_delivery_per_event_channel"
            )
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(state="pending"),
                name="alertdelivery_due",
            )
        ]

    def __str__(self) -> str:
        return f"{self.event} #{self.incident_id} → {self.channel} ({self.state})"

    @property
    def idempotency_key(self) -> str:
        """The same for every attempt (and every channel) of one incident event."""
        return f"incident-{self.incident_id}-{self.event}"


class ConfigurationProblem(models.Model):
    """A misconfiguration a process met at run time (``jobs.database.pooler_hint``), for
    ``/healthz``: one row per cause, refreshed while processes keep meeting it."""

    cause = models.CharField(max_length=64, unique=True)
    message = models.TextField()
    process = models.CharField(max_length=255, help_text="host:pid of the last to report it")
    first_seen = models.DateTimeField(db_default=Now())
    last_seen = models.DateTimeField(db_default=Now(), help_text="Database clock.")

    class Meta:
        ordering = ["cause"]

    def __str__(self) -> str:
        return self.cause
