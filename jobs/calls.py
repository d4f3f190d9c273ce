"""Ad-hoc calls of a guarded Celery task: ``.delay()`` / ``.apply_async()`` outside the schedule
take the same lease as the task's scheduled runs (celery-singleton / celery-once parity).

A task declared with ``base=GuardedTask`` never gets a message of its own. A call records a run
of the job that runs the task (trigger ``call``, the call's arguments on the run) and publishes
it like any run, to the runner task under the job's name: the worker claims it, takes the lease
per lock key (its fencing token on the run) and follows the job's overlap policy when the lease
is held (``skip``: recorded skipped, naming the holder; ``wait``: runs once the lease frees,
within the start deadline; ``replace``: asks the holder to stop). With ``raise_on_duplicate``
the call itself raises ``DuplicateCall`` while the key's lease is held or a run of it waits.

Tasks without this base are untouched: their calls write nothing and cost nothing more. An
``@job`` function is called the same way (``close_day.delay(day)``, see ``jobs.registry``).
"""

from __future__ import annotations

import json
import logging
import types
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import Task, current_app, states
from celery.result import AsyncResult, EagerResult
from django.db import transaction
from django.db.models import NOT_PROVIDED
from django.utils import timezone

from jobs import registry
from jobs.broker import messages
from jobs.exceptions import BadLockKey, DuplicateCall, NoJobForCall, NotTriggerable
from jobs.guard.delivery import report
from jobs.models import LIVE_LEASE, Job, JobKind, JobRun, Lease, RunStatus, Trigger
from jobs.values import jsonvalues, text

log = logging.getLogger(__name__)

# apply_async options a call takes: when it may start. The job decides the rest (queue,
# priority, time limits), as for its scheduled runs.
CALL_OPTIONS = frozenset({"countdown", "eta"})
# Options Celery itself may pass along that change nothing for a run's message.
IGNORED_OPTIONS = frozenset({"producer", "add_to_parent"})
PENDING = (RunStatus.SCHEDULED, RunStatus.RUNNING)


class GuardedTask(Task):
    """Base class of a task whose calls are guarded: ``@shared_task(base=GuardedTask)``.

    Options (as task options, ``@shared_task(base=GuardedTask, lock_key="sync:{city}")``):

    - ``job``: the name of the job whose lease, policies and history the calls share; by
      default the one job that runs this task.
    - ``lock_key``: a format string over the task's arguments (by name or position) or a
      callable taking them; calls with different keys run at once, as the job's runs of them.
      By default the job's own key (one at a time, whatever the arguments).
    - ``raise_on_duplicate``: raise ``DuplicateCall`` at the call while the key's lease is held
      or a run of it waits, instead of recording a run for the overlap policy to settle.
    """

    jobs_guarded = True
    job: str | None = None
    lock_key: str | Callable[..., str] | None = None
    raise_on_duplicate: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("name") or cls.__name__
        raw = cls.__dict__.get("lock_key")
        if isinstance(raw, types.FunctionType):
            cls.lock_key = staticmethod(raw)
        if cls.lock_key is not None and not (isinstance(raw, str) or callable(cls.lock_key)):
            raise TypeError(f"{name}: lock_key must be a format string or a callable")
        if cls.job is not None and not isinstance(cls.job, str):
            raise TypeError(f"{name}: job must be a job's name")
        if not isinstance(cls.raise_on_duplicate, bool):
            raise TypeError(f"{name}: raise_on_duplicate must be True or False")
        if "name" in cls.__dict__ and cls.lock_key is not None:
            registry.add_keyed_task(cls.__dict__["name"])

    def apply_async(
        self,
        args: Any = None,
        kwargs: Any = None,
        task_id: str | None = None,
        producer: Any = None,
        link: Any = None,
        link_error: Any = None,
        shadow: str | None = None,
        **options: Any,
    ) -> AsyncResult:
        given = {"task_id": task_id, "link": link, "link_error": link_error, "shadow": shadow}
        caller = Caller(self.name, self.job, self.raise_on_duplicate)
        return apply(caller, args, kwargs, {**given, **options})


@dataclass(frozen=True)
class Caller:
    """What is called: a guarded task or an ``@job`` function (``name``), the job it names
    (``None``: the one job that runs it), and whether a duplicate call raises."""

    name: str
    job: str | None = None
    raise_on_duplicate: bool = False


def apply(caller: Caller, args: Any, kwargs: Any, options: dict[str, Any]) -> AsyncResult:
    """``apply_async`` of ``caller``: the call's run, published (or, under Celery's
    ``task_always_eager``, run here); its result handle, ``jobrun-<id>`` as any run's task."""
    refused = sorted(
        option
        for option, value in options.items()
        if value is not None and option not in CALL_OPTIONS | IGNORED_OPTIONS
    )
    if refused:
        raise TypeError(
            f"{caller.name}: a guarded call takes no {', '.join(refused)} "
            f"(only {', '.join(sorted(CALL_OPTIONS))}; the job sets queue, priority and limits)"
        )
    eager = bool(current_app.conf.task_always_eager)
    run = call(
        caller,
        list(args or ()),
        dict(kwargs or {}),
        start_at=_start_at(options.get("countdown"), options.get("eta")),
        publish=not eager,
    )
    task_id = messages.task_id_for(run.pk)
    if eager:
        return _run_eagerly(caller, run.pk, task_id)
    return AsyncResult(task_id, app=current_app)


def call(
    caller: Caller,
    args: list[Any],
    kwargs: dict[str, Any],
    *,
    start_at: datetime,
    publish: bool = True,
) -> JobRun:
    """Record a run of ``caller``'s job for this call (trigger ``call``) and publish it after
    commit; refuse it with ``DuplicateCall`` when ``caller`` says ``raise_on_duplicate`` and
    its key is taken."""
    spec = registry.get(caller.name)
    try:
        spec.check_arguments(args, kwargs)
    except TypeError as exc:
        raise TypeError(f"{caller.name}: {exc}") from None
    for field, value in (("args", args), ("kwargs", kwargs)):
        _check_storable(caller.name, field, value)
    if not caller.raise_on_duplicate:
        recorded = _record_at_once(caller, args, kwargs, start_at)
        if recorded is not None:
            job, run = recorded
            if publish:
                transaction.on_commit(lambda: publish_call(job, run), robust=True)
            return run
    # A key to check, or no single job to record the run of: the path that names the problem.
    with transaction.atomic():
        job = _job_of(caller, lock=caller.raise_on_duplicate)
        try:
            key = spec.derive_lock_key(args, kwargs) if spec.lock_key else job.lock_key
        except BadLockKey as exc:
            raise BadLockKey(f"{caller.name}: its lock key {exc}") from None
        if caller.raise_on_duplicate:
            _refuse_duplicate(caller, job, spec, key)
        run = JobRun.objects.create(
            job=job, scheduled_for=start_at, trigger=Trigger.CALL, args=args, kwargs=kwargs
        )
        # After commit, so the worker finds the run; a broker outage leaves it scheduled for
        # maintenance to re-publish (a call is recorded whatever the broker does).
        if publish:
            transaction.on_commit(lambda: publish_call(job, run), robust=True)
    return run


# A call's run recorded in one statement, with the job it belongs to read in the same: the job
# (one, running this task, not continuous) and the INSERT, which happens only if it qualifies.
# Outside a transaction that is one round trip, the floor of a durable call (issue 43).
_RECORD_CALL = """
WITH job AS (SELECT * FROM jobs_job WHERE {by} = %s LIMIT 2),
run AS (
    INSERT INTO jobs_jobrun (job_id, scheduled_for, trigger, args, kwargs)
    SELECT id, %s, %s, %s::jsonb, %s::jsonb FROM job
     WHERE task = %s AND kind <> %s AND (SELECT count(*) FROM job) = 1
    RETURNING id AS call_run_id, created_at AS call_run_created_at
)
SELECT job.*, run.call_run_id, run.call_run_created_at FROM job LEFT JOIN run ON true
"""


def _record_at_once(
    caller: Caller, args: list[Any], kwargs: dict[str, Any], start_at: datetime
) -> tuple[Job, JobRun] | None:
    """The job and the run recorded for this call, in one statement; ``None`` when the call
    has no single job that may run it (nothing recorded: ``_job_of`` says why)."""
    by, value = ("name", caller.job) if caller.job is not None else ("task", caller.name)
    params = [
        value, start_at, Trigger.CALL, json.dumps(args), json.dumps(kwargs), caller.name,
        JobKind.CONTINUOUS,
    ]  # fmt: skip
    found: list[Any] = list(Job.objects.raw(_RECORD_CALL.format(by=by), params))
    if len(found) != 1 or found[0].call_run_id is None:
        return None
    job = found[0]
    run = JobRun(
        **{
            **_RUN_DEFAULTS,
            "id": job.call_run_id,
            "job": job,
            "scheduled_for": start_at,
            "trigger": Trigger.CALL,
            "args": args,
            "kwargs": kwargs,
            "created_at": job.call_run_created_at,
        }
    )
    run._state.adding = False
    run._state.db = job._state.db
    return job, run


# What the database gives a new run's columns that the INSERT leaves out.
_RUN_DEFAULTS = {
    field.attname: field.db_default
    for field in JobRun._meta.concrete_fields
    if field.db_default is not NOT_PROVIDED and not hasattr(field.db_default, "resolve_expression")
}


def _run_eagerly(caller: Caller, run_id: int, task_id: str) -> EagerResult:
    """``task_always_eager`` (a project's tests): the run goes through the runner here and
    now, under its lease, as a worker would run it; Celery's ``EagerResult`` tells the outcome
    (``task_eager_propagates`` raises a failure, as for any eager task)."""
    from jobs.guard.runner import execute_eagerly  # the runner imports the whole guard

    delivery = execute_eagerly(run_id, task_id=task_id)
    try:
        value: Any = report(delivery)
    except Exception as exc:
        if current_app.conf.task_eager_propagates:
            raise
        return EagerResult(task_id, exc, states.FAILURE, name=caller.name)
    return EagerResult(task_id, value, states.SUCCESS, name=caller.name)


def _start_at(countdown: float | None, eta: datetime | None) -> datetime:
    now = timezone.now()
    if eta is not None:
        if not isinstance(eta, datetime):
            raise TypeError("eta must be a datetime")
        return eta if timezone.is_aware(eta) else eta.replace(tzinfo=UTC)
    if countdown is not None:
        return now + timedelta(seconds=float(countdown))
    return now


def _check_storable(task: str, field: str, value: Any) -> None:
    try:
        dumped = json.dumps(value, ensure_ascii=False)
        # Before JSON reads it back: it would join two surrogates, which UTF-8 cannot encode
        # as they are, into the one character they escape, and the run would not get the value.
        problem = text.problem(dumped)
        if problem is not None:
            raise ValueError(f"a string {problem}")
        jsonvalues.check_storable(json.loads(dumped))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{task}: {field} cannot be stored as JSON: {exc}") from None


def _job_of(task: Caller, *, lock: bool) -> Job:
    jobs = Job.objects.filter(task=task.name)
    if task.job is not None:
        jobs = Job.objects.filter(name=task.job)
    if lock:
        # Concurrent calls of one job decide one after the other whether the key is taken.
        jobs = jobs.select_for_update()
    found = list(jobs[:3])
    if task.job is not None and not found:
        raise NoJobForCall(
            f"{task.name}: its calls share the job {task.job!r}, which does not exist"
        )
    if not found:
        raise NoJobForCall(
            f"{task.name}: no job runs this task, so its calls have no lease to share; "
            f"add one (manage.py jobs add NAME --task {task.name} ...) or set job="
        )
    if len(found) > 1:
        names = ", ".join(sorted(job.name for job in found))
        raise NoJobForCall(f"{task.name}: several jobs run this task ({names}); set job= to choose")
    job = found[0]
    if job.task != task.name:
        raise NoJobForCall(f"{task.name}: the job {job.name!r} runs {job.task!r}, not this task")
    if job.kind == JobKind.CONTINUOUS:
        raise NotTriggerable(f"{task.name}: the job {job.name!r} is continuous: it has no calls")
    return job


def _refuse_duplicate(task: Caller, job: Job, spec: registry.JobSpec, key: str) -> None:
    holder = Lease.objects.filter(LIVE_LEASE, key=key).values_list("holder", "token").first()
    if holder is not None:
        raise DuplicateCall(f"{task.name}: lease {key} is held by {holder[0]} (token {holder[1]})")
    for run_id, args, kwargs in JobRun.objects.filter(job=job, status__in=PENDING).values_list(
        "id", "args", "kwargs"
    ):
        if spec.lock_key is None or _key_of(spec, job, args, kwargs) == key:
            raise DuplicateCall(f"{task.name}: run {run_id} of lock key {key} waits to run")


def _key_of(spec: registry.JobSpec, job: Job, args: Any, kwargs: Any) -> str | None:
    try:
        return spec.derive_lock_key(
            job.args if args is None else args, job.kwargs if kwargs is None else kwargs
        )
    except BadLockKey:
        return None


def publish_call(job: Job, run: JobRun) -> None:
    """Publish a call's run (held until its time when that is later); a failed publish leaves
    it scheduled for maintenance to re-publish."""
    eta = run.scheduled_for if run.scheduled_for > timezone.now() else None
    try:
        messages.publish(job, run.pk, run.scheduled_for, eta=eta)
    except Exception:
        log.exception(
            "publishing a call failed; it stays scheduled for maintenance to re-publish",
            extra={"action": "publish_failed", "run_id": run.pk, "job": job.name},
        )
