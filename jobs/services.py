"""The operations on jobs that every edge (admin, CLI, API, code declarations) goes through, so
validation, the beat link and the audit trail are the same whichever way a job is changed.

Each operation takes the ``actor`` the edge acts for and records its audit entry in the
transaction of the change (``jobs.audit``)."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, models, transaction
from django_celery_beat.models import PeriodicTask

from jobs import audit, registry
from jobs.audit import Actor
from jobs.beat import entries, slot_fates
from jobs.broker.dispatch import request_digest, trigger_now, trigger_once
from jobs.database.database_clock import database_now
from jobs.exceptions import BadLockKey, BlackoutNotFound, JobNotFound
from jobs.guard import lease, run_records
from jobs.guard.runner import lock_key_for
from jobs.models import (
    JOB_DISPLAY_RELATED,
    LIVE_LEASE,
    AuditAction,
    Blackout,
    Job,
    JobKind,
    JobRun,
    Lease,
    RunStatus,
    Trigger,
)
from jobs.registry import POLICY_FIELDS
from jobs.schedule import kind
from jobs.schedule.kinds import (
    At,
    Definition,
    Schedule,
    Triggered,
    parse_duration,
    parse_instant,
    validate_timezone,
)
from jobs.upkeep import retention
from jobs.values import jsonvalues, text
from jobs.workflow import backfill, dependencies


@dataclass(frozen=True)
class JobDefinition:
    """Everything needed to create a job. ``schedule`` ``None`` means a continuous job,
    ``Triggered()`` one without a schedule of its own; ``after`` names its upstreams."""

    name: str
    task: str
    schedule: Definition | None
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    enabled: bool = True
    policies: Mapping[str, Any] = field(default_factory=dict)
    after: Sequence[str] = ()


# The options of `jobs add` that give a job's schedule, by the names POST /api/jobs (and PATCH)
# use too: each kind's (jobs.schedule.kind) that has one, continuous and triggered; one of each
# but ``tz``, which goes with the kinds that take one (cron).
SCHEDULE_CHOICES = (
    *[k.option for k in kind.registered() if k.option is not None],
    "continuous",
    "triggered",
)
SCHEDULE_FIELDS = (*SCHEDULE_CHOICES, "tz")
# The other options of `jobs add`, by the same names (``paused``: add it paused).
DEFINITION_FIELDS = ("name", "task", *SCHEDULE_FIELDS, "after", "args", "kwargs", "paused")


def schedule_from(values: Mapping[str, Any]) -> Definition | None:
    """The schedule given by ``jobs add``'s options, as parsed values or as typed (JSON):
    ``every`` (a duration: ``"10s"`` or seconds), ``cron`` with ``tz`` (UTC), ``at`` (an
    ISO 8601 instant), ``continuous`` or ``triggered`` (true). ``None`` means continuous.
    Raises ``ValidationError`` keyed by option name; the CLI and the API both read it here."""
    # False is a flag left out (0, which equals False, an interval given and refused).
    readers = _schedule_readers()
    given = [name for name in readers if _given(values.get(name))]
    tz = values.get("tz")
    takes_tz = {k.option for k in kind.registered() if k.option_takes_tz}
    if tz is not None and not takes_tz.intersection(given):
        raise ValidationError({"tz": ["Only applies to a cron schedule."]})
    if len(given) != 1:
        problem = f"Give exactly one schedule: {', '.join(readers)}."
        raise ValidationError({name: [problem] for name in given} or problem)
    if tz is not None:
        _read("tz", tz, _tz)
    choice = given[0]
    return _read(choice, values[choice], lambda value: readers[choice](value, tz))


def _given(value: Any) -> bool:
    return value is not None and value is not False


def _read(name: str, value: Any, reader: Callable[[Any], Any]) -> Any:
    try:
        return reader(value)
    except (TypeError, ValueError) as exc:
        raise ValidationError({name: [str(exc)]}) from None


def _tz(value: Any) -> None:
    if not isinstance(value, str):
        raise TypeError("must be an IANA time zone name, e.g. Europe/Paris")
    validate_timezone(value)


def _flag(made: Definition | None) -> Callable[[Any, Any], Definition | None]:
    def read(value: Any, tz: Any) -> Definition | None:
        if value is not True:
            raise TypeError("must be true (or left out)")
        return made

    return read


def _schedule_readers() -> dict[str, Callable[[Any, Any], Definition | None]]:
    """Each schedule option's reader, in ``SCHEDULE_CHOICES``' order: the registered kinds'
    (read when asked, so a kind registered later has its option), continuous and triggered."""
    readers: dict[str, Callable[[Any, Any], Definition | None]] = {
        k.option: k.from_option for k in kind.registered() if k.option is not None
    }
    return {**readers, "continuous": _flag(None), "triggered": _flag(Triggered())}


def definition_from(values: Mapping[str, Any]) -> JobDefinition:
    """A new job as ``jobs add``'s options give it, by their names (``DEFINITION_FIELDS`` and
    each policy's field name; absent or ``None``: the default). ``POST /api/jobs`` takes the
    same names; ``create_job`` validates the rest. Raises ``ValidationError`` keyed so."""
    unknown = set(values) - set(DEFINITION_FIELDS) - set(POLICY_FIELDS)
    if unknown:
        raise ValidationError({name: ["Unknown option."] for name in sorted(unknown)})
    args, kwargs, after = values.get("args"), values.get("kwargs"), values.get("after")
    return JobDefinition(
        name=values.get("name") or "",
        task=values.get("task") or "",
        schedule=schedule_from(values),
        args=[] if args is None else args,
        kwargs={} if kwargs is None else kwargs,
        enabled=not values.get("paused"),
        policies={name: values[name] for name in POLICY_FIELDS if values.get(name) is not None},
        after=[] if after is None else after,
    )


def get_job(name: str) -> Job:
    try:
        if not text.is_storable(name):  # PostgreSQL cannot hold it, so no job is named so
            raise Job.DoesNotExist
        return Job.objects.select_related(*JOB_DISPLAY_RELATED).get(name=name)
    except Job.DoesNotExist:
        raise JobNotFound(f"no job named {name!r}") from None


def _locked(job: Job) -> Job:
    """The job's stored row, locked until the transaction ends: the "before" of an edit is
    what was committed (the edge's ``job`` already holds the new values), and two concurrent
    edits are recorded one after the other."""
    return (
        Job.objects.select_related(*JOB_DISPLAY_RELATED)
        .select_for_update(of=("self",))
        .get(pk=job.pk)
    )


def validate_job(job: Job, *, exclude: list[str] | None = None) -> None:
    """Model validation plus what only the registry knows: the function exists and accepts
    the job's arguments. Raises ``ValidationError`` keyed by field name."""
    errors = _unstorable_errors(job)
    if errors:
        # Before the model's checks, whose uniqueness query the database would refuse.
        raise ValidationError(errors)
    try:
        job.full_clean(exclude=exclude)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    if "task" not in errors:
        if not registry.is_registered(job.task):
            known = ", ".join(registry.task_names()) or "none"
            errors["task"] = [
                f"{job.task!r} is not a registered job function or Celery task (known: {known})."
            ]
        else:
            errors.update(_argument_errors(job))
            errors.update(_continuous_errors(job))
    if errors:
        raise ValidationError(errors)


def _unstorable_errors(row: models.Model) -> dict[str, list[str]]:
    """The text fields holding what PostgreSQL cannot store (``jobs.values.text``)."""
    errors = {}
    for column in row._meta.concrete_fields:
        value = getattr(row, column.attname)
        problem = text.problem(value) if isinstance(value, str) else None
        if problem is not None:
            errors[column.name] = [f"This text {problem}."]
    return errors


def _argument_errors(job: Job) -> dict[str, list[str]]:
    if not isinstance(job.args, list):
        return {"args": ['Positional arguments must be a JSON list, e.g. [1, "a"].']}
    if not isinstance(job.kwargs, dict):
        return {"kwargs": ['Keyword arguments must be a JSON object, e.g. {"city": "Paris"}.']}
    for name in ("args", "kwargs"):
        try:
            jsonvalues.check_storable(getattr(job, name))
            jsonvalues.check_arguments_size(getattr(job, name))
        except ValueError as exc:
            return {name: [f"Cannot be stored: {exc}."]}
    spec = registry.get(job.task)
    if spec.is_own_job(job.name) and not job.args and not job.kwargs:
        return {}  # each run carries the arguments enqueue() gave it
    field = "kwargs" if job.kwargs else "args"
    try:
        spec.check_arguments(job.args, job.kwargs)
    except TypeError as exc:
        return {field: [f"{job.task} cannot take them: {exc}."]}
    try:
        # Refused now rather than failing every run: the key is derived before each one.
        lock_key_for(job, spec)
    except BadLockKey as exc:
        return {field: [f"The lock key of {job.task} {exc}."]}
    return {}


def _continuous_errors(job: Job) -> dict[str, list[str]]:
    # A continuous job's function runs until ctx.stopping is set; one that cannot see it would
    # return at once and be restarted once per lease ttl, for ever.
    if job.kind == JobKind.CONTINUOUS and not registry.get(job.task).takes_ctx:
        return {
            "kind": [
                f"{job.task} is a plain Celery task without a keyword-only "
                f"'{registry.CTX_PARAMETER}' parameter: a continuous job must watch "
                "ctx.stopping, so it can only be periodic."
            ]
        }
    return {}


@transaction.atomic
def create_job(definition: JobDefinition, *, actor: Actor, managed_by_code: bool = False) -> Job:
    unknown = set(definition.policies) - set(POLICY_FIELDS)
    if unknown:
        raise ValidationError({name: ["Unknown policy."] for name in sorted(unknown)})
    job = Job(
        name=definition.name,
        task=definition.task,
        kind=kind_of(definition.schedule),
        args=definition.args,
        kwargs=definition.kwargs,
        enabled=definition.enabled,
        managed_by_code=managed_by_code,
        **definition.policies,
    )
    validate_job(job)
    _check_one_off(definition.schedule, job.start_deadline)
    upstreams = dependencies.check_upstreams(job, definition.after)
    _insert(job)
    job.upstreams.set(upstreams)
    if isinstance(definition.schedule, Schedule):
        job.periodic_task = entries.store(job, definition.schedule)
        job.save(update_fields=["periodic_task"])
    audit.record(actor, AuditAction.ADD, job=job, after=audit.job_state(job))
    return job


def _insert(job: Job) -> None:
    """Save a new job; a name taken since ``validate_job`` looked (a concurrent add) is the
    same ``ValidationError`` as one taken before, not a database error."""
    try:
        with transaction.atomic():
            job.save()
    except IntegrityError:
        if not Job.objects.filter(name=job.name).exists():
            raise
        raise ValidationError({"name": [job.unique_error_message(Job, ("name",))]}) from None


def _check_one_off(
    schedule: Definition | None, start_deadline: int, kept: datetime | None = None
) -> None:
    """Refuse a one-off time past its start deadline already: its run could only be recorded
    missed, and for a reason that would not be true (that the beats fell behind). Within the
    deadline it still runs (a time typed as "now" is seconds old when it arrives). A time the
    job already had (``kept``, its stored one, however old) is no new request."""
    if not isinstance(schedule, At) or schedule.when == kept:
        return
    if schedule.when < database_now() - timedelta(seconds=start_deadline):
        raise ValidationError(
            {
                "run_at": [
                    f"{schedule.when.astimezone(UTC).isoformat()} is past, by more than the "
                    f"start deadline ({start_deadline} s): its run could only be recorded "
                    "missed. Give a later time, or run the job now."
                ]
            }
        )


def definition_of(job: Job) -> Definition | None:
    """What defines ``job`` now: its schedule, ``Triggered()``, or None (continuous); a beat
    entry that cannot be read raises ``ValueError``."""
    if job.kind == JobKind.TRIGGERED:
        return Triggered()
    return entries.schedule_of(job.periodic_task)


def kind_of(schedule: Definition | None) -> str:
    """A job's kind by what defines it: a schedule, triggered only, or continuous (None)."""
    if schedule is None:
        return JobKind.CONTINUOUS
    return JobKind.TRIGGERED if isinstance(schedule, Triggered) else JobKind.PERIODIC


@transaction.atomic
def adopt_entry(job: Job, entry: PeriodicTask, *, actor: Actor) -> Job:
    """Save ``job``, made from django-celery-beat's ``entry`` (``jobs.beat.adoption``), with that
    entry as its beat entry, left as it is."""
    job.adopted = True
    job.periodic_task = entry
    validate_job(job)
    job.save()
    audit.record(actor, AuditAction.ADD, job=job, after=audit.job_state(job))
    return job


@transaction.atomic
def save_job(
    job: Job, schedule: Definition | None, *, actor: Actor, after: Sequence[str] | None = None
) -> Job:
    """Save an edited job (admin form, API) with its schedule (and upstreams, given ``after``);
    beats pick the change up."""
    stored = _locked(job)
    before = audit.job_state(stored)
    if job.enabled or stored.enabled:  # resumed, or paused by this edit: by whom, no reason
        job.paused_by = "" if job.enabled else str(actor)
        job.pause_reason, job.paused_until = "", None
    clocked = None if job.periodic_task is None else job.periodic_task.clocked
    job.kind = kind_of(schedule)
    scheduled = isinstance(schedule, Schedule)
    old_task = None if scheduled else job.periodic_task
    if not scheduled:
        job.periodic_task = None  # before validating: only a periodic job has a beat entry
    validate_job(job)
    _check_one_off(schedule, job.start_deadline, None if clocked is None else clocked.clocked_time)
    upstreams = None if after is None else dependencies.check_upstreams(job, after)
    job.save()
    if upstreams is not None:
        job.upstreams.set(upstreams)
    if isinstance(schedule, Schedule):
        job.periodic_task = entries.store(job, schedule)
        job.save(update_fields=["periodic_task"])
    if old_task is not None:
        old_task.delete()
    old, new = audit.changed(before, audit.job_state(job))
    audit.record(actor, AuditAction.EDIT, job=job, before=old, after=new)
    return job


@transaction.atomic
def set_enabled(
    job: Job, enabled: bool, *, actor: Actor, reason: str = "", until: datetime | None = None
) -> Job:
    """Pause (``reason`` and ``until`` as ``pause_reason`` and ``pause_end`` read them) or
    resume; recorded even when the job already was so (``before`` says it was). A resume
    clears who paused it, why and until when."""
    before = pause_state(_locked(job))
    job.enabled = enabled
    job.paused_by = "" if enabled else str(actor)
    job.pause_reason = "" if enabled else reason
    job.paused_until = None if enabled else until
    job.save(update_fields=["enabled", *PAUSE_FIELDS, "updated_at"])
    entries.refresh(job)
    action = AuditAction.RESUME if enabled else AuditAction.PAUSE
    audit.record(actor, action, job=job, before=before, after=pause_state(job))
    return job


# What a pause records besides ``enabled``: who, why and until when.
PAUSE_FIELDS = ("paused_by", "pause_reason", "paused_until")


def pause_state(job: Job) -> dict[str, Any]:
    """``enabled``, and for a paused job who paused it, why and until when (ISO 8601)."""
    if job.enabled:
        return {"enabled": True}
    until = job.paused_until
    return {
        "enabled": False,
        "paused_by": job.paused_by,
        "pause_reason": job.pause_reason,
        "paused_until": None if until is None else until.isoformat(),
    }


def pause_reason(value: Any) -> str:
    """A pause's reason as given (``None``: none), checked as the job's field checks it (one
    line, at most ``MAX_PAUSE_REASON`` characters); ``ValidationError`` keyed ``reason``."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValidationError({"reason": ["Must be text."]})
    try:
        return str(Job._meta.get_field("pause_reason").clean(value.strip(), None))
    except ValidationError as exc:
        raise ValidationError({"reason": exc.messages}) from None


def pause_end(value: Any) -> datetime | None:
    """When a pause ends: an ISO 8601 instant (naive: UTC) or a duration from now such as
    ``"2h"`` or ``"1d12h"`` (``None`` or ``""``: no end). Refused unless it is in the future by
    the database clock, the beats' reference; ``ValidationError`` keyed ``until``."""
    if value is None or value == "":
        return None
    now = database_now()
    until = _read("until", value, lambda given: _instant_or_later(given, now))
    if until <= now:
        raise ValidationError(
            {"until": [f"{until.isoformat()} has passed: give a time in the future or a duration."]}
        )
    return until


def _instant_or_later(value: Any, now: datetime) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise TypeError('must be an ISO 8601 time or a duration from now such as "2h"')
    try:
        return now + parse_duration(value)
    except ValueError:
        if not isinstance(value, str) or value.strip()[:1] in ("-", "+"):
            raise
    try:
        return parse_instant(value).when
    except ValueError:
        raise ValueError(f"{value!r} {_UNTIL_FORMS}") from None


_UNTIL_FORMS = 'is not an ISO 8601 time (2030-01-01T09:00:00Z) nor a duration from now ("2h")'


@transaction.atomic
def mute(name: str, until: datetime | None, *, actor: Actor) -> Job:
    """Mute a job's alerts until ``until`` (``None``: unmute). Its incidents still open and
    show; one that opened while muted is notified if a bad run joins it after the mute."""
    job = _locked(get_job(name))
    was = job.alerts_muted_until
    job.alerts_muted_until = until
    job.save(update_fields=["alerts_muted_until"])
    audit.record(
        actor,
        AuditAction.EDIT,
        job=job,
        before={"alerts_muted_until": None if was is None else was.isoformat()},
        after={"alerts_muted_until": None if until is None else until.isoformat()},
    )
    return job


# How a job's runs' durations are judged (jobs.alerts.baseline): what `jobs durations` changes.
DURATION_FIELDS = ("max_duration", "long_run_factor", "min_duration", "baseline_alerts")


@transaction.atomic
def set_durations(job_name: str, values: Mapping[str, Any], *, actor: Actor) -> Job:
    """Change how a job's run durations are judged: ``values`` holds some of
    ``DURATION_FIELDS`` (``None`` clears a limit). Raises ``ValidationError`` keyed by field.
    An operator's edit: a job declared in code stops following its declaration."""
    unknown = sorted(set(values) - set(DURATION_FIELDS))
    if unknown:
        raise ValidationError({name: "Not a duration setting." for name in unknown})
    job = _locked(get_job(job_name))
    before = {name: getattr(job, name) for name in DURATION_FIELDS}
    for name, value in values.items():
        setattr(job, name, value)
    job.clean_fields(exclude=[f.name for f in Job._meta.fields if f.name not in values])
    job.clean()
    job.managed_by_code = False
    job.save(update_fields=[*DURATION_FIELDS, "managed_by_code"])
    old, new = audit.changed(before, {name: getattr(job, name) for name in DURATION_FIELDS})
    audit.record(actor, AuditAction.EDIT, job=job, before=old, after=new)
    return job


@transaction.atomic
def set_alerts(
    name: str, *, channels: str | None = None, reasons: list[str] | None = None, actor: Actor
) -> Job:
    """Change where a job's incidents are notified and for which reasons (``None``: unchanged);
    a job declared in code stays managed by its code (these are no part of a declaration)."""
    job = _locked(get_job(name))
    before = {"alert_channels": job.alert_channels, "alert_reasons": job.alert_reasons}
    if channels is not None:
        job.alert_channels = channels
    if reasons is not None:
        job.alert_reasons = reasons
    fields = ["alert_channels", "alert_reasons"]
    # Only these two: what else the row holds is not this edit's business.
    job.clean_fields(exclude=[f.name for f in Job._meta.fields if f.name not in fields])
    job.save(update_fields=fields)
    after = {"alert_channels": job.alert_channels, "alert_reasons": job.alert_reasons}
    old, new = audit.changed(before, after)
    audit.record(actor, AuditAction.EDIT, job=job, before=old, after=new)
    return job


def pause(name: str, *, actor: Actor, reason: Any = None, until: Any = None) -> Job:
    """Pause ``name`` with a ``reason`` and an end (see ``pause_reason`` and ``pause_end``);
    pausing a paused job replaces its reason and end."""
    reason, end = pause_reason(reason), pause_end(until)
    return set_enabled(get_job(name), False, actor=actor, reason=reason, until=end)


def resume(name: str, *, actor: Actor) -> Job:
    return set_enabled(get_job(name), True, actor=actor)


def select_jobs(*, queue: str | None = None, match: str | None = None) -> list[Job]:
    """The jobs on ``queue`` whose names match the shell pattern ``match`` (``billing.*``;
    ``*``, ``?`` and ``[...]`` as in ``fnmatch``, case-sensitive), by name; at least one of the
    two must be given (``ValidationError`` otherwise)."""
    if not queue and not match:
        raise ValidationError("Give a queue, a name pattern or both.")
    chosen = Job.objects.select_related(*JOB_DISPLAY_RELATED).order_by("name")
    if queue:
        chosen = chosen.filter(queue=queue)
    return [job for job in chosen if not match or fnmatch.fnmatchcase(job.name, match)]


@transaction.atomic
def pause_many(
    *,
    queue: str | None = None,
    match: str | None = None,
    reason: Any = None,
    until: Any = None,
    actor: Actor,
) -> list[Job]:
    """Pause the running jobs ``select_jobs`` chooses, each audited, all or none; the ones
    paused. Jobs already paused keep their own reason and end (an end given here must not
    resume a job that someone paused for good)."""
    chosen = [job for job in select_jobs(queue=queue, match=match) if job.enabled]
    return pause_each(chosen, reason=reason, until=until, actor=actor)


@transaction.atomic
def pause_each(
    jobs: Sequence[Job], *, reason: Any = None, until: Any = None, actor: Actor
) -> list[Job]:
    """Pause each of ``jobs`` (the admin's selection) with one reason and end, each audited,
    all or none."""
    reason, end = pause_reason(reason), pause_end(until)
    return [set_enabled(job, False, actor=actor, reason=reason, until=end) for job in jobs]


@transaction.atomic
def resume_many(*, queue: str | None = None, match: str | None = None, actor: Actor) -> list[Job]:
    """Resume the paused jobs ``select_jobs`` chooses, each audited, all or none; the ones
    resumed."""
    chosen = [job for job in select_jobs(queue=queue, match=match) if not job.enabled]
    return [set_enabled(job, True, actor=actor) for job in chosen]


@transaction.atomic
def remove(name: str, *, actor: Actor) -> None:
    job = _locked(get_job(name))
    before = audit.job_state(job)
    task = job.periodic_task
    job.delete()
    if task is not None:
        task.delete()
    audit.record(actor, AuditAction.DELETE, job_name=name, before=before)


@transaction.atomic
def run_now(
    name: str,
    trigger: Trigger = Trigger.MANUAL,
    *,
    actor: Actor,
    kwargs: dict[str, Any] | None = None,
) -> JobRun:
    """A run now; ``kwargs`` update the job's own keyword arguments for this run only."""
    job = get_job(name)
    run = trigger_now(job, trigger, kwargs=run_kwargs(job, kwargs))
    audit.record(actor, AuditAction.RUN_NOW, job=job, after=_run_values(run))
    return run


@transaction.atomic
def run_once(
    name: str,
    idempotency_key: str,
    trigger: Trigger = Trigger.API,
    *,
    actor: Actor,
    kwargs: dict[str, Any] | None = None,
) -> tuple[JobRun, bool]:
    """``run_now`` at most once per ``idempotency_key``: the flag says whether a run was made.
    A replayed key makes nothing, so it records nothing; the same key with other ``kwargs``
    raises ``IdempotencyKeyReused``."""
    job = get_job(name)
    # No kwargs and empty kwargs ask for the same run: the job's own arguments.
    if kwargs == {}:
        kwargs = None
    # The request as given, not as merged with the job's: an edit of the job between a request
    # and its retry does not make the retry another request.
    digest = request_digest({"kwargs": kwargs})
    merged = run_kwargs(job, kwargs)
    run, created = trigger_once(job, idempotency_key, trigger, kwargs=merged, digest=digest)
    if created:
        audit.record(actor, AuditAction.RUN_NOW, job=job, after=_run_values(run))
    return run, created


@transaction.atomic
def backfill_job(
    name: str,
    since: datetime,
    until: datetime,
    *,
    actor: Actor,
    max_runs: int = backfill.DEFAULT_MAX_RUNS,
    dry_run: bool = False,
) -> backfill.BackfillResult:
    """Make the runs of the job's slots in ``[since, until]`` that have none
    (``jobs.workflow.backfill``); with ``dry_run``, only say which. Raises ``ValidationError``
    naming the bad field."""
    job = get_job(name)
    planned = backfill.plan(job, since, until, now=database_now(), max_runs=max_runs)
    if dry_run:
        assert planned.schedule is not None  # the plan read it
        fates = slot_fates.of_slots(job, planned.schedule, planned.missing)
        return backfill.BackfillResult(planned, created=0, dry_run=True, fates=tuple(fates))
    created = backfill.create(planned)
    audit.record(
        actor,
        AuditAction.BACKFILL,
        job=job,
        after={"since": since.isoformat(), "until": until.isoformat(), "created": created},
    )
    transaction.on_commit(lambda: backfill.release_and_publish([job.pk]), robust=True)
    return backfill.BackfillResult(planned, created=created, dry_run=False)


@transaction.atomic
def add_blackout(
    name: str,
    starts_at: datetime,
    ends_at: datetime,
    *,
    actor: Actor,
    job_name: str | None = None,
    description: str = "",
) -> Blackout:
    """A blackout window over one job (``job_name``) or every job; ``ValidationError`` naming
    the field when it cannot be one."""
    try:
        job = None if job_name is None else get_job(job_name)
    except JobNotFound as exc:
        # A bad value of the window's job field (400, exit status 2), not a missing resource.
        raise ValidationError({"job": [str(exc)]}) from None
    window = Blackout(
        name=name, job=job, starts_at=starts_at, ends_at=ends_at, description=description
    )
    errors = _unstorable_errors(window)
    if errors:
        raise ValidationError(errors)
    window.full_clean()
    window.save()
    audit.record(
        actor,
        AuditAction.BLACKOUT_ADD,
        job=job,
        target=f"blackout:{name}",
        after=blackout_values(window),
    )
    return window


@transaction.atomic
def remove_blackout(name: str, *, actor: Actor) -> None:
    window = None
    if text.is_storable(name):  # PostgreSQL cannot hold it otherwise, so no window is named so
        window = Blackout.objects.select_related("job").filter(name=name).first()
    if window is None:
        raise BlackoutNotFound(f"no blackout window named {name!r}")
    before = blackout_values(window)
    window.delete()
    audit.record(
        actor,
        AuditAction.BLACKOUT_REMOVE,
        job=window.job,
        target=f"blackout:{name}",
        before=before,
    )


def blackout_values(window: Blackout) -> dict[str, Any]:
    """A blackout window as the audit trail, the CLI and the API show it."""
    return {
        "name": window.name,
        "job": None if window.job is None else window.job.name,
        "starts_at": window.starts_at.isoformat(),
        "ends_at": window.ends_at.isoformat(),
        "description": window.description,
    }


def run_kwargs(job: Job, given: Any) -> dict[str, Any] | None:
    """The keyword arguments of a run triggered with ``given``: the job's, updated with them
    (``None``: the job's own, as for every run). Checked against the function's signature like
    the job's; raises ``ValidationError`` on ``kwargs``."""
    if given is None:
        return None
    if not isinstance(given, dict):
        raise ValidationError(
            {"kwargs": ['Keyword arguments must be a JSON object, e.g. {"city": "Paris"}.']}
        )
    merged = {**job.kwargs, **given}
    probe = Job(name=job.name, task=job.task, args=job.args, kwargs=merged)
    errors = _argument_errors(probe)
    if errors:
        messages = [message for field_errors in errors.values() for message in field_errors]
        raise ValidationError({"kwargs": messages})
    return merged


def _run_values(run: JobRun) -> dict[str, Any]:
    values = {"run": run.pk, "trigger": run.trigger, "idempotency_key": run.idempotency_key}
    if run.kwargs is not None:
        values["kwargs"] = run.kwargs
    return values


@transaction.atomic
def release_lease(name: str, *, actor: Actor) -> bool:
    """Force-release the job's lease (each of its leases, with max_concurrency); the token
    still grows on the next acquisition. Whether one was live."""
    job = get_job(name)
    released = False
    for key in lease.slot_keys(job.lock_key, job.max_concurrency):
        # Locked, so the holder recorded is the one released.
        held = Lease.objects.select_for_update().filter(LIVE_LEASE, key=key).first()
        if held is None and job.max_concurrency > 1:
            continue  # one entry per lease released, not one per idle slot
        released = lease.force_release(key) or released
        before = {"live": False} if held is None else _holder(held, live=True)
        after = {"live": False} if held is None else _holder(held, live=False)
        audit.record(
            actor, AuditAction.RELEASE_LEASE, job=job, target=key, before=before, after=after
        )
    return released


@transaction.atomic
def cancel_run(
    run_id: int, *, actor: Actor, reason: str, running: bool = False, **noted: Any
) -> JobRun | None:
    """Record run ``run_id`` cancelled, saying ``reason``: a run no worker claimed yet never
    starts; with ``running`` (its process was stopped), a running run too, its lease given back
    with its own token, so its late finish and fenced writes are refused. ``None``, recording
    nothing, when it was neither (it ended meanwhile, or it is a continuous tenure). ``noted``
    goes into the audit entry."""
    run = JobRun.objects.select_related("job").filter(pk=run_id).first()
    if run is None or run.trigger == Trigger.CONTINUOUS:
        return None
    before = run.status
    if before == RunStatus.SCHEDULED:
        cancelled = run_records.cancel_scheduled(run_id, error=reason)
    elif before == RunStatus.RUNNING and running:
        cancelled = _cancel_running(run, reason)
    else:
        return None
    if not cancelled:
        return None  # its worker (or maintenance) recorded it first: that outcome stands
    run.refresh_from_db()
    audit.record(
        actor,
        AuditAction.CANCEL,
        job=run.job,
        target=f"run:{run_id}",
        before={"status": before},
        after={"status": run.status, "error": reason, **noted},
    )
    return run


def _cancel_running(run: JobRun, reason: str) -> bool:
    # The same fenced finish as the run's own (guard/run_records), so whichever comes first is
    # the one outcome; a lease that had already lapsed makes it lost, not cancelled.
    if run.fencing_token is None:
        finished = run_records.finish_unleased(run.pk, status=RunStatus.CANCELLED, error=reason)
    else:
        finished = run_records.finish_fenced(
            run.pk,
            key=run.lease_key,
            token=run.fencing_token,
            status=RunStatus.CANCELLED,
            error=reason,
            min_hold=run.job.min_hold,
        )
    return finished.status == RunStatus.CANCELLED


def _holder(held: Lease, *, live: bool) -> dict[str, Any]:
    return {"holder": held.holder, "token": held.token, "live": live}


def prune(*, dry_run: bool, actor: Actor) -> retention.PruneResult:
    """Delete finished runs past retention now; a real prune records what it deleted. (The
    maintenance loop's hourly prunes are the cluster's own, not an operator's: unrecorded.)"""
    result = retention.prune(dry_run=dry_run)
    if not dry_run:
        # After the batches, which commit one by one: the entry says what was deleted.
        audit.record(actor, AuditAction.PRUNE, after={"deleted": dict(result.deleted)})
    return result
