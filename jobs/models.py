"""The app's tables: job definitions, run records, leases and nodes.

The schedule of a periodic job lives in django-celery-beat's schedule models (interval, crontab
with time zone, clocked) through ``Job.periodic_task``; ``jobs.beat_link`` keeps that row in step
with the job, so there is one place for each fact.
"""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django_celery_beat.models import PeriodicTask


class JobKind(models.TextChoices):
    PERIODIC = "periodic", "periodic"
    CONTINUOUS = "continuous", "continuous"


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


class Trigger(models.TextChoices):
    SCHEDULED = "scheduled"
    MANUAL = "manual"
    API = "api"
    CONTINUOUS = "continuous"
    RETRY = "retry"


class Job(models.Model):
    name = models.CharField(
        max_length=190, unique=True, help_text="Unique name of this job, e.g. nightly-report."
    )
    task = models.CharField(
        max_length=200,
        help_text="The registered job function this job runs (see `manage.py jobs tasks`).",
    )
    kind = models.CharField(max_length=16, choices=JobKind.choices, default=JobKind.PERIODIC)
    enabled = models.BooleanField(default=True, help_text="Paused jobs are not scheduled.")
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
        validators=[MinValueValidator(3)],
        help_text="Seconds a lease stays valid without renewal; renewed every ttl/3.",
    )
    min_hold = models.PositiveIntegerField(
        default=0,
        help_text="Seconds the lease stays held after the run starts even if it ends sooner, "
        "so a fast job cannot run twice for one slot on nodes with skewed clocks.",
    )
    queue = models.CharField(max_length=100, default="default", help_text="Celery queue.")
    priority = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MaxValueValidator(9)],
        help_text="Celery message priority, 0-9.",
    )
    managed_by_code = models.BooleanField(
        default=False,
        editable=False,
        help_text="Declared with @job(..., every=/cron=) and not edited since: code changes apply.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind=JobKind.CONTINUOUS, periodic_task__isnull=True)
                | Q(kind=JobKind.PERIODIC),
                name="continuous_job_has_no_beat_entry",
            ),
            models.CheckConstraint(
                condition=Q(time_limit__isnull=True)
                | Q(soft_time_limit__isnull=True)
                | Q(soft_time_limit__lt=models.F("time_limit")),
                name="soft_time_limit_below_hard",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def lock_key(self) -> str:
        """The default lease key: one per job."""
        return f"job:{self.name}"


class JobRun(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="runs")
    scheduled_for = models.DateTimeField(help_text="The slot (UTC) or the trigger time.")
    # Database defaults, because beats insert runs in bulk with raw SQL (jobs/records.py).
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

    class Meta:
        ordering = ["-scheduled_for", "-id"]
        constraints = [
            # Guarantee 1: however many beats fire a slot, only one run record exists for it.
            models.UniqueConstraint(
                fields=["job", "scheduled_for"],
                condition=Q(trigger="scheduled"),
                name="one_run_per_slot",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "scheduled_for"], name="jobrun_status_slot"),
            models.Index(fields=["job", "-scheduled_for"], name="jobrun_job_slot"),
            models.Index(fields=["node", "-scheduled_for"], name="jobrun_node_slot"),
            models.Index(fields=["-scheduled_for"], name="jobrun_slot"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id}@{self.scheduled_for.isoformat()} ({self.status})"

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


class Lease(models.Model):
    """One row per lock key. Valid while ``expires_at > now()`` by the database clock.

    All reads and writes of this table that carry a guarantee are in ``jobs/lease.py``.
    """

    key = models.CharField(max_length=255, primary_key=True)
    holder = models.CharField(max_length=255)
    token = models.BigIntegerField(help_text="Fencing token: grows on every acquisition.")
    acquired_at = models.DateTimeField()
    expires_at = models.DateTimeField()

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

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
