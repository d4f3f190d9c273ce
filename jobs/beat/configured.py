"""Schedules declared in Celery's configuration become jobs.

A Celery project declares periodic tasks in three places: django-celery-beat rows
(``jobs.beat.adoption``), a ``beat_schedule`` (``CELERY_BEAT_SCHEDULE`` in Django's settings,
``app.conf.beat_schedule = {...}``), and ``app.add_periodic_task`` calls (in handlers of
``on_after_configure`` / ``on_after_finalize``), which Celery also keeps in ``beat_schedule``.
Stock django-celery-beat writes each configuration entry into a ``PeriodicTask`` row of the same
name at start-up; so do we, and the row is adopted as a job, so that the configuration and the
rows take one path (``adoption``) into the cluster. Unlike stock beat, the entry stays a
declaration: an entry removed from the code disables its job (history kept, audited).

Who owns an entry's job: the code, until an operator edits the job (``managed_by_code``, as for
``@job`` declarations); then the operator, and the code no longer touches it.

Which configuration wins while beats of two releases run side by side (a rolling deploy): the
newest one that a live beat holds. A beat applies its configuration at start-up when it is new
(never applied before) or already the latest; a beat holding an older configuration (an old
release's beat that restarts mid-deploy) applies nothing while a live beat holds the latest, so
jobs never flap between the two. Every beat looks again now and then (``RECHECK_SECONDS``): once
no live beat holds the latest configuration (a rollback completed), the one the live beats hold
is applied. Applying is serialised by a transaction-scoped advisory lock.

More in docs/architecture.md, "Module notes", and the README's "Existing schedules".
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import numbers
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import Celery, current_app, schedules
from django.conf import settings
from django.db import connection, transaction
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask, SolarSchedule

from jobs import registry
from jobs.audit import Actor, AuditAction
from jobs.models import BeatHeartbeat, CeleryConfiguration, Configured, Job
from jobs.values.names import job_name_for

log = logging.getLogger(__name__)

CONFIGURATION = Actor.code("celery configuration")
# How often a running beat checks that its configuration is the one applied (see above).
RECHECK_SECONDS = 30.0
# Options of an entry that a job carries; others are reported as dropped.
CARRIED_OPTIONS = ("queue", "exchange", "routing_key", "priority", "headers", "expires")
# Any one constant: only beats applying a configuration take this lock.
_APPLY_LOCK = 0x6A6F6273_63666720  # "jobscfg "


class NotCarried(ValueError):
    """An entry that no job can carry, with the reason and what to do."""


@dataclass(frozen=True)
class Declared:
    """One configuration entry: the ``PeriodicTask`` values it becomes, or why it cannot."""

    key: str
    task: str
    values: dict[str, Any] = field(default_factory=dict)  # the row's fields; empty if not carried
    schedule: Any = None  # Celery's schedule object, for the report's next slots
    notes: tuple[str, ...] = ()  # what changes or is dropped on the way
    reason: str = ""  # empty: carried

    @property
    def carried(self) -> bool:
        return not self.reason

    @property
    def job_name(self) -> str:
        return job_name_for(self.key)

    def digest(self) -> str:
        return _digest([self.key, self.task, _jsonable(self.values), self.reason])


# --- reading Celery's configuration ---------------------------------------------------------


def celery_entries(app: Celery | None = None) -> dict[str, Mapping[str, Any]]:
    """The entries the project's Celery beat would schedule: ``beat_schedule`` after the app's
    ``on_after_configure`` / ``on_after_finalize`` handlers ran (``add_periodic_task``), and the
    default ``celery.backend_cleanup`` entry under the rule Celery's beat installs it by."""
    app = app or _current_app()
    # Task modules (whose handlers may add entries) are imported by Celery's beat before its
    # scheduler starts, and by ``jobs adopt`` (``import_task_modules``); importing them again
    # here would set Django up again, which resets the process's logging.
    app.finalize(auto=True)
    entries: dict[str, Mapping[str, Any]] = dict(app.conf.beat_schedule or {})
    # celery.beat.Scheduler.install_default_entries (stock django-celery-beat installs it
    # whenever results expire; Celery's beat only when the backend does not expire them itself).
    if (
        app.conf.result_expires
        and not app.backend.supports_autoexpire
        and "celery.backend_cleanup" not in entries
    ):
        entries["celery.backend_cleanup"] = {
            "task": "celery.backend_cleanup",
            "schedule": schedules.crontab("0", "4", "*"),
            "options": {"expires": 12 * 3600},
        }
    return entries


def import_task_modules(app: Celery | None = None) -> None:
    """Import the modules a beat imports before its scheduler starts (``imports``, the tasks
    Celery autodiscovers), once per process: a command that reports on the schedule must see
    what their handlers add."""
    app = app or _current_app()
    if not app.loader.worker_initialized:
        app.loader.import_default_modules()


def declared(app: Celery | None = None) -> list[Declared]:
    """Every configuration entry, judged; ordered by key."""
    app = app or _current_app()
    return [_judge(key, entry, app) for key, entry in sorted(celery_entries(app).items())]


def _current_app() -> Celery:
    app: Any = current_app
    current: Celery = app._get_current_object()
    return current


def fingerprint(entries: Iterable[Declared]) -> str:
    return _digest(sorted(entry.digest() for entry in entries))


def _judge(key: str, entry: Mapping[str, Any], app: Celery) -> Declared:
    task = str(entry.get("task", ""))
    try:
        unknown = sorted(set(entry) - {"task", "schedule", "args", "kwargs", "options", "relative"})
        if unknown:
            raise NotCarried(f"unknown field(s) {', '.join(unknown)}: Celery's beat refuses them")
        if not task:
            raise NotCarried("it names no task")
        if not registry.is_registered(task):
            raise NotCarried(
                f"its task {task!r} is not registered here: neither a @job function nor one of "
                "the project's Celery tasks (is its module imported by the workers and beats?)"
            )
        declared_schedule: Any = entry.get("schedule")
        relative = bool(entry.get("relative", False))
        schedule = schedules.maybe_schedule(declared_schedule, relative, app=app)
        notes: list[str] = []
        values = _schedule_fields(schedule, app, notes)
        values.update(
            task=task,
            args=_json_text(entry.get("args") or [], "args", (list, tuple)),
            kwargs=_json_text(entry.get("kwargs") or {}, "kwargs", (dict,)),
        )
        values.update(_option_fields(entry.get("options") or {}, notes))
    except NotCarried as exc:
        return Declared(key, task, reason=str(exc))
    return Declared(key, task, values, schedule, tuple(notes))


def _schedule_fields(schedule: Any, app: Celery, notes: list[str]) -> dict[str, Any]:
    """The ``PeriodicTask`` schedule fields of a Celery schedule (unsaved schedule rows)."""
    empty: dict[str, Any] = {"interval": None, "crontab": None, "solar": None, "clocked": None}
    # Exact types: a subclass may override is_due, which no row can carry.
    if type(schedule) is schedules.schedule:
        return {**empty, **_interval_fields(schedule, app, notes)}
    if type(schedule) is schedules.crontab:
        parts = {
            name: _crontab_field(getattr(schedule, f"_orig_{name}"))
            for name in ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
        }
        return {**empty, "crontab": CrontabSchedule(**parts, timezone=crontab_zone(schedule, app))}
    if type(schedule) is schedules.solar:
        sun = SolarSchedule(event=schedule.event, latitude=schedule.lat, longitude=schedule.lon)
        return {**empty, "solar": sun}
    kind = f"{type(schedule).__module__}.{type(schedule).__qualname__}"
    raise NotCarried(
        f"its schedule is a {kind}, a schedule class with its own is_due, which only Celery's "
        "own beat can run: express it as a number of seconds, a timedelta, a crontab or a "
        "solar schedule, or keep this entry on stock celery beat"
    )


def _interval_fields(schedule: Any, app: Celery, notes: list[str]) -> dict[str, Any]:
    seconds = schedule.run_every.total_seconds()
    start_time = None
    if schedule.relative:
        # celery.utils.time.remaining rounds each due time down to the interval's resolution
        # (days, hours or minutes, in the app's zone): every floor(interval / resolution)
        # resolution units, on the resolution's boundaries.
        resolution = next((r for r in (86400, 3600, 60) if seconds >= r), None)
        if resolution is not None:
            rounded = math.floor(seconds / resolution) * resolution
            if rounded != seconds:
                notes.append(
                    f"relative=True: Celery rounds each run down to the {_unit(resolution)}, "
                    f"so it runs every {rounded:g} s, not {seconds:g} s"
                )
            seconds = rounded
            zone = _zone(app)
            start_time = datetime(2000, 1, 1, tzinfo=zone).astimezone(UTC)
            if resolution == 86400 and rounded == 86400:
                # Daily on the zone's midnight, across DST too: a crontab says it exactly.
                crontab = CrontabSchedule(
                    minute="0", hour="0", day_of_month="*", month_of_year="*", day_of_week="*",
                    timezone=zone.key if hasattr(zone, "key") else "UTC",
                )  # fmt: skip
                return {"crontab": crontab, "start_time": None}
    if seconds < 1 or seconds != int(seconds):
        raise NotCarried(
            f"its interval of {seconds:g} s is not a whole number of seconds of at least 1"
        )
    if not schedule.relative:
        notes.append(
            "an interval's runs are anchored (on multiples of the interval since 1970-01-01 "
            "UTC, the same on every beat); Celery's start one interval after the beat starts"
        )
    every = IntervalSchedule(every=int(seconds), period=IntervalSchedule.SECONDS)
    return {"interval": every, "start_time": start_time}


def _unit(seconds: int) -> str:
    return {86400: "day", 3600: "hour", 60: "minute"}[seconds]


def _crontab_field(value: Any) -> str:
    """A crontab field as Celery was given it (text, a number or a set of numbers) in text."""
    if isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):
        return str(value)
    try:
        return ",".join(str(v) for v in sorted(value))
    except TypeError:
        raise NotCarried(f"its crontab field {value!r} is neither text nor numbers") from None


def crontab_zone(schedule: Any, app: Celery) -> str:
    """The zone a crontab's fields are read in: its ``nowfun``'s, else the app's (Celery's
    ``timezone`` setting, else Django's ``TIME_ZONE``)."""
    if schedule.nowfun is not None:
        name = _zone_name(schedule.nowfun().tzinfo)
        if name:
            return name
    return _zone_name(_zone(app)) or "UTC"


def _zone(app: Celery) -> Any:
    import zoneinfo

    name = app.conf.timezone or getattr(settings, "TIME_ZONE", None) or "UTC"
    try:
        return zoneinfo.ZoneInfo(str(name))
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return zoneinfo.ZoneInfo("UTC")


def _zone_name(tzinfo: Any) -> str:
    if tzinfo is None:
        return ""
    if tzinfo is UTC or (getattr(tzinfo, "utcoffset", None) and str(tzinfo) in ("UTC", "utc")):
        return "UTC"
    return str(getattr(tzinfo, "key", None) or getattr(tzinfo, "zone", None) or "")


def _json_text(value: Any, name: str, kinds: tuple[type, ...]) -> str:
    if not isinstance(value, kinds):
        raise NotCarried(f"its {name} must be a {' or '.join(k.__name__ for k in kinds)}")
    try:
        return json.dumps(list(value) if isinstance(value, tuple) else value)
    except (TypeError, ValueError) as exc:
        raise NotCarried(f"its {name} cannot be stored as JSON: {exc}") from None


def _option_fields(options: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    dropped = sorted(set(options) - set(CARRIED_OPTIONS) - {"expire_seconds"})
    if dropped:
        notes.append(f"option(s) not carried, ignored: {', '.join(dropped)}")
    queue = options.get("queue")
    exchange = options.get("exchange")
    values: dict[str, Any] = {
        "queue": str(getattr(queue, "name", queue)) if queue else None,
        "exchange": str(getattr(exchange, "name", exchange)) if exchange else None,
        "routing_key": options.get("routing_key") or None,
        "priority": options.get("priority"),
        "headers": _json_text(options.get("headers") or {}, "headers", (dict,)),
        "expire_seconds": options.get("expire_seconds"),
        "expires": None,
    }
    expires = options.get("expires")
    if isinstance(expires, datetime):
        values["expires"] = expires if expires.tzinfo else expires.replace(tzinfo=UTC)
    elif isinstance(expires, numbers.Real) and not isinstance(expires, bool):
        # Seconds after sending: the run's start deadline (the message is sent at its slot).
        values["expire_seconds"] = max(1, math.ceil(float(expires)))
    elif expires is not None:
        raise NotCarried(f"its expires option {expires!r} is neither seconds nor a datetime")
    return values


# --- applying it ------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one application of the configuration did."""

    applied: bool
    fingerprint: str
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    not_carried: list[Declared] = field(default_factory=list)
    why_not: str = ""  # when not applied


def sync(
    entries: list[Declared] | None = None, *, beat: str = "", log_refusals: bool = True
) -> Outcome:
    """Apply this process's configuration (``entries``, else read now) if it is the one to win
    (see the module's notes)."""
    entries = declared() if entries is None else entries
    mine = fingerprint(entries)
    not_carried = [entry for entry in entries if not entry.carried]
    if log_refusals:
        for entry in not_carried:
            log.error(
                "Celery beat_schedule entry %r (%s) is not carried over and does not run: %s",
                entry.key,
                entry.task,
                entry.reason,
                extra={"action": "not_adoptable", "entry": entry.key, "reason": entry.reason},
            )
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_APPLY_LOCK])
        why_not = _why_not_apply(mine, beat)
        if why_not:
            return Outcome(False, mine, not_carried=not_carried, why_not=why_not)
        outcome = _apply(entries, mine)
        CeleryConfiguration.objects.update_or_create(
            fingerprint=mine,
            defaults={"applied_by": beat, "entries": [entry.key for entry in entries]},
        )
        # applied_at by the database clock: the order of applications across beats.
        CeleryConfiguration.objects.filter(fingerprint=mine).update(applied_at=_database_now())
    outcome.not_carried = not_carried
    if outcome.created or outcome.updated or outcome.removed:
        log.info(
            "Celery configuration %s applied: %d new, %d changed, %d removed",
            mine[:12],
            len(outcome.created),
            len(outcome.updated),
            len(outcome.removed),
            extra={"action": "configuration_applied", "configuration": mine[:12]},
        )
    return outcome


class BeatConfiguration:
    """A beat's side: apply its configuration at start-up, then look again now and then."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder  # jobs.beat.heartbeat.BeatHeartbeatRecorder
        self.entries: list[Declared] | None = None
        self.fingerprint = ""
        self._next_check = 0.0

    def start(self, app: Celery) -> Outcome:
        self.entries = declared(app)
        outcome = sync(self.entries, beat=self.recorder.name)
        self.fingerprint = outcome.fingerprint
        self.recorder.configuration = outcome.fingerprint
        self.recorder.write()  # holders of a configuration are known by their heartbeats
        if not outcome.applied:
            log.warning(
                "Celery configuration not applied: %s",
                outcome.why_not,
                extra={"action": "configuration_not_applied"},
            )
        self._next_check = time.monotonic() + RECHECK_SECONDS
        return outcome

    def recheck(self) -> None:
        """Apply this beat's configuration if the latest one has no live holder any more."""
        if self.entries is None or time.monotonic() < self._next_check:
            return
        self._next_check = time.monotonic() + RECHECK_SECONDS
        latest = _latest()
        if latest is None or latest.fingerprint == self.fingerprint:
            return
        if live_beats_holding(latest.fingerprint, excluding=self.recorder.name):
            return
        sync(self.entries, beat=self.recorder.name, log_refusals=False)


def _why_not_apply(mine: str, beat: str) -> str:
    latest = _latest()
    if latest is None or latest.fingerprint == mine:
        return ""
    if not CeleryConfiguration.objects.filter(fingerprint=mine).exists():
        return ""  # new: a newer release than what was applied
    holders = live_beats_holding(latest.fingerprint, excluding=beat)
    if not holders:
        return ""  # nobody runs the latest any more: a rollback completed
    return (
        f"this beat holds configuration {mine[:12]}, older than {latest.fingerprint[:12]} "
        f"(applied {latest.applied_at:%Y-%m-%d %H:%M:%S} UTC), which live beat(s) "
        f"{', '.join(sorted(holders)[:3])} hold: the jobs follow the newer one"
    )


def _latest() -> CeleryConfiguration | None:
    """The configuration applied last (by the database clock)."""
    return CeleryConfiguration.objects.order_by("-applied_at", "-id").first()


def live_beats_holding(configuration: str, *, excluding: str = "") -> list[str]:
    from jobs.conf import get_ops_conf

    stale_after = timedelta(seconds=get_ops_conf().beat_stale_after)
    rows = BeatHeartbeat.objects.filter(
        configuration=configuration, last_seen__gt=_database_now() - stale_after
    ).exclude(name=excluding)
    return list(rows.values_list("name", flat=True))


def _database_now() -> datetime:
    from jobs.database.database_clock import database_now

    return database_now()


def _apply(entries: list[Declared], mine: str) -> Outcome:
    from jobs.beat import adoption

    outcome = Outcome(True, mine)
    keys = {entry.job_name for entry in entries}
    names = [entry.job_name for entry in entries if entry.carried]
    jobs = {
        job.name: job
        for job in Job.objects.exclude(configured=Configured.NO)
        | Job.objects.filter(name__in=names, adopted=True)
    }
    adopt_ids: list[int] = []
    sync_ids: list[int] = []
    for entry in entries:
        if not entry.carried:
            continue
        name = entry.job_name
        job = jobs.get(name)
        if job is not None and job.configured != Configured.NO and not job.managed_by_code:
            continue  # an operator's now
        row = _write_row(entry)
        if row is None:
            continue
        if job is None:
            adopt_ids.append(row.pk)
        else:
            sync_ids.append(job.pk)
            outcome.updated.append(name)
            _claim(job, reappeared=job.configured == Configured.REMOVED)
    for verdict in adoption.adopt(adopt_ids) if adopt_ids else []:
        if verdict.adoptable:
            Job.objects.filter(name=verdict.name, adopted=True).update(
                configured=Configured.DECLARED, managed_by_code=True
            )
            outcome.created.append(verdict.name)
    if sync_ids:
        adoption.sync(sync_ids)
    for name, job in jobs.items():
        if name not in keys and job.configured == Configured.DECLARED and _remove(job):
            outcome.removed.append(name)
    return outcome


def _write_row(entry: Declared) -> PeriodicTask | None:
    """Create or update the entry's ``PeriodicTask`` (as stock django-celery-beat's
    ``update_from_dict`` does); ``None`` when the row holds these values already."""
    values = dict(entry.values)
    for name in ("interval", "crontab", "solar", "clocked"):
        model = values.get(name)
        if model is not None:
            values[name] = _saved_schedule(model)
    row = PeriodicTask.objects.filter(name=entry.job_name).first()
    if row is not None and all(_same(getattr(row, k), v) for k, v in values.items()):
        return row
    if row is None:
        row = PeriodicTask(name=entry.job_name, enabled=True)
    for name, value in values.items():
        setattr(row, name, value)
    row.save()
    return row


def _same(current: Any, wanted: Any) -> bool:
    if hasattr(current, "pk") and hasattr(wanted, "pk"):
        return bool(current.pk == wanted.pk)
    return bool(current == wanted)


def _saved_schedule(model: Any) -> Any:
    """The stored schedule row equal to ``model`` (unsaved), created if missing."""
    fields = _own_fields(model)
    found = type(model).objects.filter(**fields).first()
    return found if found is not None else type(model).objects.create(**fields)


def _claim(job: Job, *, reappeared: bool) -> None:
    """An adopted job the configuration declares: the code's (until an operator edits it)."""
    if job.configured == Configured.DECLARED and job.managed_by_code:
        return
    Job.objects.filter(pk=job.pk).update(managed_by_code=True)
    if reappeared:
        _switch(job, Configured.DECLARED, enabled=True)
    else:
        Job.objects.filter(pk=job.pk).update(configured=Configured.DECLARED)


def _remove(job: Job) -> bool:
    """Disable a job whose entry left the configuration (history kept, audited); an
    operator's job (edited since) is left as it is, and so is a paused one (back in the code,
    it stays paused)."""
    if not job.managed_by_code or not job.enabled:
        log.info(
            "Celery beat_schedule entry %r was removed from the configuration; its job is %s: "
            "left as it is",
            job.name,
            "paused" if job.managed_by_code else "an operator's (edited since)",
            extra={"action": "configuration_removed_kept", "job": job.name},
        )
        Job.objects.filter(pk=job.pk).update(configured=Configured.NO)
        return False
    _switch(job, Configured.REMOVED, enabled=False)
    log.warning(
        "Celery beat_schedule entry %r was removed from the configuration: its job is "
        "disabled (its history is kept)",
        job.name,
        extra={"action": "configuration_removed", "job": job.name},
    )
    return True


def _switch(job: Job, configured: Configured, *, enabled: bool) -> None:
    """Pause or resume ``job`` for the configuration, with its entry and an audit entry."""
    from jobs import audit

    before = {"enabled": job.enabled, "configured": str(job.configured)}
    Job.objects.filter(pk=job.pk).update(configured=configured, enabled=enabled)
    PeriodicTask.objects.filter(pk=job.periodic_task_id).update(enabled=enabled)
    job.refresh_from_db()
    action = AuditAction.RESUME if enabled else AuditAction.PAUSE
    after = {"enabled": enabled, "configured": configured.value}
    audit.record(CONFIGURATION, action, job=job, before=before, after=after)


# --- helpers ----------------------------------------------------------------------------------


def _own_fields(model: Any) -> dict[str, Any]:
    """A schedule row's values, without its primary key."""
    return {
        f.name: getattr(model, f.name) for f in model._meta.concrete_fields if not f.primary_key
    }


def _jsonable(values: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in values.items():
        if hasattr(value, "_meta"):
            value = {name: str(field) for name, field in _own_fields(value).items()}
        out[name] = value
    return out


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()
