"""Adoption: django-celery-beat ``PeriodicTask`` rows that no job owns become jobs.

More in docs/architecture.md, "Module notes".
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from celery import current_app
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django_celery_beat.models import PeriodicTask

from jobs import registry
from jobs.audit import Actor
from jobs.beat import entries, schedule_errors
from jobs.models import Job, JobKind, validate_headers
from jobs.values.names import job_name_for

log = logging.getLogger(__name__)

BEAT = Actor.code("beat adoption")
# An entry's schedule rows, read with it.
_SCHEDULES = ("interval", "crontab", "clocked", "solar")


@dataclass(frozen=True)
class Verdict:
    """What adoption makes of one entry: the job it becomes, or why it cannot be adopted."""

    entry_id: int
    name: str
    task: str
    reason: str = ""  # empty: adoptable
    job: Job | None = None  # unsaved
    enabled: bool = True  # the entry's: a disabled one becomes a paused job

    @property
    def adoptable(self) -> bool:
        return not self.reason

    def record(self) -> dict[str, object]:
        return {
            "entry": self.entry_id,
            "name": self.name,
            "task": self.task,
            "enabled": self.enabled,
            "adoptable": self.adoptable,
            "reason": self.reason,
        }


class NotAdoptable(ValueError):
    """An entry's values that no job can carry."""


def unowned(entry_ids: Collection[int] | None = None) -> QuerySet[PeriodicTask]:
    """Entries that no job owns, disabled ones too (``entry_ids``: only those)."""
    entries = PeriodicTask.objects.filter(job__isnull=True).select_related(*_SCHEDULES)
    if entry_ids is not None:
        entries = entries.filter(pk__in=list(entry_ids))
    return entries.order_by("name")


def preview(entry_ids: Collection[int] | None = None) -> list[Verdict]:
    """What adopting now would do, without writing anything."""
    return [judge(entry) for entry in unowned(entry_ids)]


def judge(entry: PeriodicTask) -> Verdict:
    try:
        job = _job_for(entry)
    except NotAdoptable as exc:
        return _refused(entry, str(exc))
    return Verdict(entry.pk, entry.name, entry.task, job=job, enabled=entry.enabled)


def _refused(entry: PeriodicTask, reason: str) -> Verdict:
    return Verdict(entry.pk, entry.name, entry.task, reason=reason, enabled=entry.enabled)


def adopt(entry_ids: Collection[int] | None = None, *, actor: Actor = BEAT) -> list[Verdict]:
    """Adopt the entries without a job (``entry_ids``: only those that are), a disabled one as
    a paused job (so it can be resumed on its job page); returns each entry's verdict. Safe to
    run from every beat at once."""
    verdicts = []
    for entry in unowned(entry_ids):
        verdict = _adopt_one(entry, actor)
        if verdict is not None:
            verdicts.append(verdict)
    return verdicts


def _adopt_one(entry: PeriodicTask, actor: Actor) -> Verdict | None:
    """The verdict, or ``None`` when another beat adopted the entry first."""
    from jobs.services import adopt_entry

    try:
        with transaction.atomic():
            # Another beat adopting the same entry waits here, then finds it owned. The job
            # is made from the entry as locked: an edit made meanwhile (enabled, say) is in it.
            locked = (
                PeriodicTask.objects.select_for_update(of=("self",))
                .select_related(*_SCHEDULES)
                .filter(pk=entry.pk)
                .first()
            )
            if locked is None or Job.objects.filter(periodic_task_id=entry.pk).exists():
                return None
            verdict = judge(locked)
            if verdict.job is not None:
                adopt_entry(verdict.job, locked, actor=actor)
    except IntegrityError:
        if Job.objects.filter(periodic_task_id=entry.pk).exists():
            return None
        verdict = _refused(entry, _name_taken(entry.name))
    except ValidationError as exc:
        verdict = _refused(entry, _reason(exc))
    _log(verdict)
    return verdict


def _log(verdict: Verdict) -> None:
    fields = {"entry": verdict.entry_id, "job": verdict.name, "task": verdict.task}
    if verdict.adoptable:
        log.info(
            "adopted django-celery-beat entry %r as a job",
            verdict.name,
            extra={**fields, "action": "adopted"},
        )
    elif not verdict.enabled:
        # It would not run under django-celery-beat either; judged again once enabled.
        log.info(
            "disabled django-celery-beat entry %r cannot be adopted, it stays as it is: %s",
            verdict.name,
            verdict.reason,
            extra={**fields, "action": "not_adoptable", "reason": verdict.reason},
        )
    else:
        log.error(
            "django-celery-beat entry %r cannot be adopted, it does not run: %s",
            verdict.name,
            verdict.reason,
            extra={**fields, "action": "not_adoptable", "reason": verdict.reason},
        )


def sync(job_ids: Collection[int] | None = None) -> dict[int, tuple[str, str]]:
    """Copy edits of adopted jobs' entries (code, django-celery-beat's admin, SQL) to the jobs
    (``job_ids``; ``None``: every adopted job); returns the name of each job whose entry holds
    values no job can carry, and why it cannot be scheduled."""
    errors: dict[int, tuple[str, str]] = {}
    adopted = Job.objects.filter(adopted=True)
    if job_ids is not None:
        adopted = adopted.filter(pk__in=list(job_ids))
    adopted = adopted.select_related(
        "periodic_task__interval",
        "periodic_task__crontab",
        "periodic_task__clocked",
        "periodic_task__solar",
    )
    for job in adopted:
        entry = job.periodic_task
        if entry is None:
            continue
        try:
            values = _carried(entry)
            _check_schedule(entry)
        except NotAdoptable as exc:
            errors[job.pk] = (job.name, f"its django-celery-beat entry {entry.name!r}: {exc}")
            continue
        changed = {name: value for name, value in values.items() if getattr(job, name) != value}
        if changed:
            # No job save: that would write the entry back, which is where the values come from.
            Job.objects.filter(pk=job.pk).update(**changed)
            log.info(
                "adopted job %s follows its edited entry: %s",
                job.name,
                ", ".join(sorted(changed)),
                extra={"action": "adopted_synced", "job": job.name},
            )
    return errors


# --- from an entry to a job ---------------------------------------------------------------


def _job_for(entry: PeriodicTask) -> Job:
    if entry.name.startswith(entries.beat_entry_name("")):
        raise NotAdoptable(
            "named like the platform's own entries (job:<name>), which belong to a job: "
            "this one's job was removed; delete the entry or rename it"
        )
    # A row's name a job cannot have (a slash, a space at an end) is carried as Celery's entry
    # keys are, rather than refused.
    job_name = job_name_for(entry.name)
    if Job.objects.filter(name=job_name).exists():
        raise NotAdoptable(_name_taken(job_name))
    _check_schedule(entry)
    job = Job(name=job_name, kind=JobKind.PERIODIC, adopted=True, periodic_task=entry)
    for name, value in _carried(entry).items():
        setattr(job, name, value)
    from jobs.services import validate_job

    try:
        validate_job(job)
    except ValidationError as exc:
        raise NotAdoptable(_reason(exc)) from None
    return job


def _carried(entry: PeriodicTask) -> dict[str, Any]:
    """The job fields an entry's values carry (its schedule is read from the entry itself)."""
    if not registry.is_registered(entry.task):
        raise NotAdoptable(
            f"its task {entry.task!r} is not registered here: neither a @job function nor one "
            "of the project's Celery tasks (is its module imported by the workers and beats?)"
        )
    if entry.expires is not None and entry.expire_seconds:
        raise NotAdoptable(
            "it has both 'expires' and 'expire_seconds', which django-celery-beat refuses: keep one"
        )
    values: dict[str, Any] = {
        "task": entry.task,
        "args": _json(entry.args or "[]", list, "args", "a JSON list"),
        "kwargs": _json(entry.kwargs or "{}", dict, "kwargs", "a JSON object"),
        "headers": _headers(entry.headers),
        "enabled": entry.enabled,
        "queue": entry.queue or _routed_queue(entry.task),
        "exchange": entry.exchange or "",
        "routing_key": entry.routing_key or "",
        "description": entry.description or "",
        "expires_at": entry.expires,
        "one_off": entry.one_off and entry.clocked_id is None,  # a clocked row's is its schedule
    }
    if entry.priority is not None:
        values["priority"] = entry.priority
    if entry.expire_seconds:
        values["start_deadline"] = entry.expire_seconds
    return values


def _check_schedule(entry: PeriodicTask) -> None:
    try:
        entries.schedule_of(entry)
    except Exception as exc:
        reason = schedule_errors.describe(exc)
        raise NotAdoptable(f"its schedule cannot be read: {reason}") from None


def _json(text: str, kind: type, field: str, what: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise NotAdoptable(f"its {field} are not JSON: {exc}") from None
    if not isinstance(value, kind):
        raise NotAdoptable(f"its {field} must be {what}, not {text[:60]!r}")
    return value


def _headers(text: str | None) -> dict[str, Any]:
    # Checked here too: an edited row's values reach its job without the job's validation.
    headers: dict[str, Any] = _json(text or "{}", dict, "headers", "a JSON object")
    try:
        validate_headers(headers)
    except ValidationError as exc:
        raise NotAdoptable(f"its headers: {' '.join(exc.messages)}") from None
    return headers


def _routed_queue(task: str) -> str:
    """The queue Celery would send ``task`` to (task_routes, the task's own queue, the default),
    since its runs are sent as another task (``registry.RUN_TASK``)."""
    route = current_app.amqp.router.route({}, task)
    queue = route.get("queue")
    return str(getattr(queue, "name", queue) or current_app.conf.task_default_queue)


def _name_taken(name: str) -> str:
    return f"a job named {name!r} already exists and does not own this entry: rename the entry"


def _reason(exc: ValidationError) -> str:
    if not hasattr(exc, "error_dict"):
        return "; ".join(exc.messages)
    return "; ".join(
        f"{field}: {' '.join(messages)}" for field, messages in exc.message_dict.items()
    )
