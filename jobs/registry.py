"""What a job may run: ``@job("name")`` functions and the project's own Celery tasks.

Only registered names can be scheduled (the admin, CLI and API offer nothing else), so no form
ever accepts an arbitrary import path. Each ``@job`` function is also a Celery task of the same
name, whose message carries only the run's id. A plain Celery task (``@shared_task``, not
Celery's internal ``celery.*`` ones) is schedulable too, but its own task must never receive a
run's message: its runs are sent to ``RUN_TASK``, which runs it under the same guard (claim,
lease, fenced finish), with Celery's ``shadow`` naming the job in logs and Flower.

A plain task gets no ``ctx``; one that declares a keyword-only parameter named ``ctx``
(``def sync(city, *, ctx=None)``) is given it, to watch ``ctx.stopping`` or use ``ctx.fenced()``.

A Django ``@task`` (Django 6's Tasks framework) whose backend is ours registers itself under its
module path when it is defined (``jobs.django_tasks``); its runs go to ``RUN_TASK`` too.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, TypeVar

from celery import Task, current_app, current_task, shared_task
from celery._state import (  # type: ignore[attr-defined]  # public there, not in the stubs
    pop_current_task,
    push_current_task,
)
from celery.app.trace import task_has_custom

from jobs.exceptions import BadLockKey, RegistryConflict, RunFailed, RunLost, UnknownJobFunction
from jobs.runlog.lines import level_number
from jobs.schedule.kinds import Cron, Definition, Triggered, parse_duration, parse_interval
from jobs.values.names import (
    has_control_character,
    invisible_characters,
    job_name_problems,
    skeleton,
)

JobFunction = Callable[..., Any]
F = TypeVar("F", bound=JobFunction)

# The Celery task that executes a run of a plain task's job (see the module's docstring).
RUN_TASK = "jobs.run"
# The keyword-only parameter through which a plain task asks for its run's context.
CTX_PARAMETER = "ctx"

# Policy names a decorator may set, each a Job model field validated by the model, in the order
# the admin page, the CLI and the API show them.
POLICY_FIELDS: tuple[str, ...] = (
    "overlap",
    "start_deadline",
    "catch_up",
    "on_lost",
    "max_retries",
    "retry_backoff",
    "soft_time_limit",
    "time_limit",
    "lease_ttl",
    "min_hold",
    "queue",
    "priority",
    "max_concurrency",
    "rate_limit_runs",
    "rate_limit_period",
    "coalesce",
    # calendars (jobs.schedule.calendars)
    "business_days_only",
    "holiday_calendar",
    "active_from",
    "active_until",
    # where this job's incidents are notified, and for which reasons
    "alert_channels",
    "alert_reasons",
    # how its runs' durations are judged (jobs.alerts.baseline)
    "max_duration",
    "long_run_factor",
    "min_duration",
    "baseline_alerts",
)


# The longest lock key: the width of the lease table's key column (and of a run's lease_key).
LOCK_KEY_MAX_LENGTH = 255


@dataclass(frozen=True)
class JobSpec:
    """A registered job function and what its declaration says about it."""

    name: str
    func: JobFunction
    schedule: Definition | None = None
    continuous: bool = False
    # The jobs it runs after (jobs.workflow.dependencies); without a schedule it is triggered only.
    after: tuple[str, ...] = ()
    policies: dict[str, Any] = field(default_factory=dict)
    lock_key: str | Callable[..., str] | None = None
    # Run as a continuous job, call the function once per this many seconds while the lease is
    # held (a step function), instead of once for the whole tenure (a loop until ctx.stopping).
    step_every: float | None = None
    # A plain Celery task (``func`` is the task): called with the job's arguments only, plus
    # ``ctx=`` when it declares that keyword-only parameter.
    plain: bool = False
    # A Django ``@task`` of our backend (``func`` is Django's ``Task``): called with the job's
    # arguments, after Django's ``context`` when it ``takes_context`` (jobs.django_tasks).
    django: bool = False
    # The lowest ``logging`` level its runs keep in their log (jobs.runlog); ``None``: the
    # configured one, JOBS_RUN_LOG_LEVEL.
    log_level: int | None = None

    def derive_lock_key(self, args: list[Any], kwargs: dict[str, Any]) -> str:
        """The lock key ``lock_key`` derives from a job's arguments; ``BadLockKey`` when it
        cannot, or derives one the lease table cannot hold."""
        assert self.lock_key is not None
        try:
            if callable(self.lock_key):
                key = str(self.lock_key(*args, **kwargs))
            else:
                key = self.lock_key.format(*args, **self._named(args, kwargs))
        except Exception as exc:  # the declaration's own code: whatever it raises
            raise BadLockKey(f"cannot be derived from the arguments: {exc!r}") from exc
        if len(key) > LOCK_KEY_MAX_LENGTH:
            raise BadLockKey(
                f"is {len(key)} characters long with these arguments, at most {LOCK_KEY_MAX_LENGTH}"
            )
        if has_control_character(key):  # a NUL, a line break: see jobs.values.names
            raise BadLockKey(
                "contains a line break or another control character with these arguments"
            )
        return key

    def _named(self, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The arguments by parameter name, however they were passed (defaults included), so
        ``"sync:{city}"`` names ``sync.delay("Paris")`` and ``sync.delay(city="Paris")`` alike
        (a job function's ``ctx`` left out)."""
        leading = [None] * self._leading
        try:
            bound = inspect.signature(self.function).bind_partial(*leading, *args, **kwargs)
        except TypeError:
            return kwargs
        bound.apply_defaults()
        named = dict(bound.arguments)
        if leading:
            named.pop(next(iter(named)), None)  # ctx, or Django's context
        return {**named, **kwargs}

    @property
    def _leading(self) -> int:
        """How many leading parameters the runner fills: a job function's ``ctx``, a Django
        task's ``context`` when it takes it."""
        if self.django:
            task: Any = self.func
            return 1 if task.takes_context else 0
        return 0 if self.plain else 1

    def is_own_job(self, job_name: str) -> bool:
        """Whether the job ``job_name`` is this Django task's own, the one its ``enqueue()``
        records runs of (named after the task, ``jobs.django_tasks``): each run carries the
        arguments it was enqueued with."""
        return self.django and job_name == self.name

    def lease_per_run(self, job_name: str) -> bool:
        """Whether each run of the job ``job_name`` takes a lease of its own rather than the
        job's: the runs of a Django task's own job when the task declares no lock key, which
        run side by side as Django's tasks do, each still fenced and found lost when its
        worker dies."""
        return self.lock_key is None and self.is_own_job(job_name)

    @property
    def origin(self) -> str:
        """What declared it, as the admin's chooser and ``jobs tasks`` say it."""
        if self.django:
            return "Django task"
        return "Celery task" if self.plain else "job function"

    @property
    def takes_ctx(self) -> bool:
        if self.django:
            return False
        return not self.plain or _asks_for_ctx(self.func)

    @property
    def message_task(self) -> str:
        """The Celery task a run's message is sent to."""
        return RUN_TASK if self.plain or self.django else self.name

    def call(self, ctx: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Call the function for one run (or one step of a continuous job)."""
        if self.django:
            return handlers.get("call_django_task")(self.func, ctx, args, kwargs)
        if not self.plain:
            return self.func(ctx, *args, **kwargs)
        assert isinstance(self.func, Task)  # a plain task's function is its Celery task
        extra = {CTX_PARAMETER: ctx} if self.takes_ctx else {}
        return _call_task(self.func, args, kwargs, extra)

    def check_arguments(self, args: list[Any], kwargs: dict[str, Any]) -> None:
        """Raise ``TypeError`` saying why ``args``/``kwargs`` do not fit the function."""
        if self.django:
            inspect.signature(self.function).bind(*[None] * self._leading, *args, **kwargs)
            return
        if not self.plain:
            inspect.signature(self.func).bind(None, *args, **kwargs)
            return
        if CTX_PARAMETER in kwargs and self.takes_ctx:
            raise TypeError(f"{CTX_PARAMETER!r} is given by the runner, not by the job")
        extra = {CTX_PARAMETER: None} if self.takes_ctx else {}
        inspect.signature(_callable_of(self.func)).bind(*args, **kwargs, **extra)

    @property
    def declares_job(self) -> bool:
        """Whether a Job row should exist for this function without anyone adding it."""
        return self.schedule is not None or self.continuous

    @property
    def summary(self) -> str:
        """The docstring's first sentence, which often wraps onto its second line."""
        return first_sentence(inspect.getdoc(self.function) or "")

    @property
    def function(self) -> JobFunction:
        """The Python function a run ends up calling (a Celery task's ``run``, a Django task's
        ``func``)."""
        task: Any = self.func
        return task.func if self.django else _callable_of(task)


# A summary is one line of `jobs tasks` and one option of the admin's chooser.
SUMMARY_LIMIT = 120
# A sentence ends at . ! or ? before a capital (or the end): "e.g. the city" goes on.
_SENTENCE_END = re.compile(r"[.!?](?=\s+[A-Z]|$)")


def first_sentence(text: str, limit: int = SUMMARY_LIMIT) -> str:
    """The first sentence of ``text``'s first paragraph, whole, or cut at a word's end with an
    ellipsis when longer than ``limit``."""
    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    end = _SENTENCE_END.search(paragraph)
    sentence = paragraph if end is None else paragraph[: end.end()]
    if len(sentence) <= limit:
        return sentence
    return sentence[: limit + 1].rsplit(" ", 1)[0].rstrip(",;:") + "…"


_REGISTRY: dict[str, JobSpec] = {}
# The names of the functions declared with a lock_key (kept as they register: every claim asks).
_KEYED: set[str] = set()
# Django ``@task`` functions of our backend, by module path (jobs.django_tasks).
_DJANGO_TASKS: dict[str, JobSpec] = {}


def job(
    name: str,
    *,
    every: str | int | timedelta | None = None,
    cron: str | None = None,
    tz: str = "UTC",
    continuous: bool = False,
    lock_key: str | Callable[..., str] | None = None,
    step_every: str | int | float | timedelta | None = None,
    after: Sequence[str] = (),
    log_level: str | None = None,
    **policies: Any,
) -> Callable[[F], F]:
    """Register ``func(ctx, *args, **kwargs)`` as the job function ``name``.

    With ``every=`` or ``cron=`` (or ``continuous=True``) a job of the same name is created in the
    database on migrate; an operator may pause it or override its schedule in the admin.
    With ``step_every=`` (e.g. ``"2s"``), a continuous job of this function calls it once per
    step for as long as it holds its lease; without it, the function is called once per tenure
    and loops until ``ctx.stopping`` is set. ``log_level=`` (``"DEBUG"`` ... ``"CRITICAL"``) is
    the lowest level of the lines its runs keep in their log (default ``JOBS_RUN_LOG_LEVEL``).
    """
    unknown = set(policies) - set(POLICY_FIELDS)
    if unknown:
        raise TypeError(f"@job({name!r}): unknown option(s) {sorted(unknown)}")
    if sum(x is not None for x in (every, cron)) + continuous > 1:
        raise TypeError(f"@job({name!r}): give at most one of every=, cron=, continuous=True")
    declares_job = every is not None or cron is not None or continuous
    problems = job_name_problems(name) if declares_job else []
    if not declares_job and invisible_characters(name):  # a task name is read and chosen too
        problems = ["A job function's name cannot contain an invisible or format character."]
    if problems:  # the job it declares could not be saved (jobs.values.names)
        raise TypeError(f"@job({name!r}): {' '.join(problems)}")
    step_seconds = None if step_every is None else parse_duration(step_every).total_seconds()
    if step_seconds is not None and step_seconds <= 0:
        raise TypeError(f"@job({name!r}): step_every must be positive")
    if isinstance(after, str):
        raise TypeError(f"@job({name!r}): after= takes a list of job names")
    if after and continuous:
        raise TypeError(f"@job({name!r}): a continuous job cannot run after others")
    try:
        level = None if log_level is None else level_number(log_level)
    except ValueError as exc:
        raise TypeError(f"@job({name!r}): log_level={log_level!r}: {exc}") from None
    schedule: Definition | None = None
    if every is not None:
        schedule = parse_interval(every)
    elif cron is not None:
        schedule = Cron(expr=cron, tz=tz)
    elif after:
        schedule = Triggered()  # runs only after its upstreams (and when triggered)

    def register(func: F) -> F:
        params = list(inspect.signature(func).parameters.values())
        if not params or params[0].kind not in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            raise TypeError(f"@job({name!r}): {func.__qualname__} must take ctx as first argument")
        spec = JobSpec(
            name=name,
            func=func,
            schedule=schedule,
            continuous=continuous,
            after=tuple(after),
            policies=dict(policies),
            lock_key=lock_key,
            step_every=step_seconds,
            log_level=level,
        )
        if lock_key is not None and spec.declares_job:
            try:
                # The job it declares has no arguments: its runs will all derive this key.
                spec.derive_lock_key([], {})
            except BadLockKey as exc:
                raise TypeError(f"@job({name!r}): its lock key {exc}") from None
        existing = _REGISTRY.get(name)
        if existing is not None and _qualified(existing.func) != _qualified(func):
            raise RegistryConflict(
                f"job name {name!r} is registered twice: {_qualified(existing.func)} "
                f"and {_qualified(func)}"
            )
        _refuse_lookalike(spec)
        _REGISTRY[name] = spec
        _KEYED.discard(name)
        if lock_key is not None:
            _KEYED.add(name)
        _register_celery_task(name)
        _add_calls(func, name)
        return func

    return register


def _refuse_lookalike(spec: JobSpec) -> None:
    """Two declared jobs whose names read alike could never both have their rows
    (``jobs.models.DistinctName``): refused where they are declared, as a name registered twice."""
    if not spec.declares_job:
        return
    for other in _REGISTRY.values():
        if other.name == spec.name or not other.declares_job:
            continue
        if skeleton(other.name) == skeleton(spec.name):
            raise RegistryConflict(
                f"job name {spec.name!r} reads like the declared job {other.name!r} "
                f"({_qualified(other.func)}): give one a name that reads differently"
            )


def get(name: str) -> JobSpec:
    """The ``@job`` function, Django task or plain Celery task ``name``."""
    spec = _REGISTRY.get(name) or _django_task(name)
    if spec is not None:
        return spec
    task = _plain_task(name)
    if task is None:
        raise UnknownJobFunction(
            f"{name!r} is not a registered job function or Celery task; "
            f"known: {', '.join(task_names()) or 'none'}"
        )
    # A guarded task (jobs.calls.GuardedTask) may derive its lock key from its arguments, for
    # its calls and its jobs' runs alike.
    lock_key = getattr(task, "lock_key", None) if getattr(task, "jobs_guarded", False) else None
    return JobSpec(name=name, func=task, plain=True, lock_key=lock_key)


def names() -> list[str]:
    """The ``@job`` functions."""
    return sorted(_REGISTRY)


def specs() -> list[JobSpec]:
    """The ``@job`` functions (what code declares)."""
    return [_REGISTRY[name] for name in names()]


def task_names() -> list[str]:
    """Everything a job may run: the ``@job`` functions, the Django tasks of our backend and the
    plain project tasks."""
    plain = _plain_tasks()  # imports the task modules, where Django tasks are defined too
    return sorted({*_REGISTRY, *_DJANGO_TASKS, *plain})


def all_specs() -> list[JobSpec]:
    """What the admin's chooser, ``jobs tasks`` and the API offer."""
    return [get(name) for name in task_names()]


def keyed_names() -> frozenset[str]:
    """The functions and guarded tasks whose lock key comes from their arguments (each run's
    claim asks)."""
    return frozenset(_KEYED)


def add_keyed_task(name: str) -> None:
    """A guarded Celery task declared a lock key (``jobs.calls.GuardedTask``)."""
    _KEYED.add(name)


def add_django_task(task: Any) -> None:
    """A Django ``@task`` whose backend is ours was defined (``jobs.django_tasks``): a job may
    run it, by its module path. Its ``.using()`` variants are the same task."""
    name = task.module_path
    if name not in _DJANGO_TASKS:
        _DJANGO_TASKS[name] = JobSpec(name=name, func=task, django=True)
        # Its lease is taken by the runner, not the claim: per run, or per its lock key.
        _KEYED.add(name)


def is_django_task(name: str) -> bool:
    """Whether ``name`` is a Django task of our backend, among those defined so far."""
    return name in _DJANGO_TASKS


def declare_django_task(
    name: str, *, lock_key: str | Callable[..., str] | None, policies: dict[str, Any]
) -> None:
    """What ``jobs.django_tasks.guarded`` declares of the Django task ``name``."""
    unknown = set(policies) - set(POLICY_FIELDS)
    if unknown:
        raise TypeError(f"guarded({name!r}): unknown option(s) {sorted(unknown)}")
    _DJANGO_TASKS[name] = replace(_DJANGO_TASKS[name], lock_key=lock_key, policies=policies)


def is_registered(name: str) -> bool:
    """Whether a job may run ``name``: a ``@job`` function, a Django task of our backend or a
    plain project task. The one rule of what is schedulable (validation, and the beat before it
    sends a run)."""
    return name in _REGISTRY or _django_task(name) is not None or _plain_task(name) is not None


def carries_runs(celery_task: str) -> bool:
    """Whether a Celery task's messages are runs (``run_id`` in their kwargs): the task of a
    ``@job`` function or ``RUN_TASK``."""
    return celery_task in _REGISTRY or celery_task == RUN_TASK


# The one Celery task that Celery's beat schedules itself (jobs.beat.configured): schedulable.
BACKEND_CLEANUP = "celery.backend_cleanup"


def _is_plain(name: str) -> bool:
    # Celery's own tasks (chords, maps) are its machinery, not the project's work.
    if name in _REGISTRY or name in _DJANGO_TASKS or name == RUN_TASK:
        return False
    return name == BACKEND_CLEANUP or not name.startswith("celery.")


def _django_task(name: str) -> JobSpec | None:
    spec = _DJANGO_TASKS.get(name)
    if spec is None and name not in _REGISTRY and _import_task_modules():
        spec = _DJANGO_TASKS.get(name)
    return spec


def _plain_task(name: str) -> Task | None:
    if not _is_plain(name):
        return None
    task = current_app.tasks.get(name)
    if task is None and _import_task_modules():
        task = current_app.tasks.get(name)
    return task


def _plain_tasks() -> dict[str, Task]:
    _import_task_modules()
    return {name: task for name, task in current_app.tasks.items() if _is_plain(name)}


_modules_imported = False


def _import_task_modules() -> bool:
    """Import the modules Celery imports when a worker starts (autodiscovered ``tasks``
    modules, ``imports``/``include``), so a web process or the CLI knows the same tasks as the
    workers; once per process. Whether this call imported them."""
    global _modules_imported
    if _modules_imported:
        return False
    _modules_imported = True
    loader = current_app.loader
    # A worker or beat imported them as it started; doing it again would run django.setup()
    # again (Celery's Django fix-up), whose logging setup writes into Celery's redirected
    # stderr: log lines lost, or a process stuck on the proxy's lock.
    if loader.worker_initialized:
        return False
    loader.import_default_modules()
    return True


def _callable_of(func: JobFunction) -> JobFunction:
    """What a call of ``func`` ends up calling: a Celery task's ``run`` (bound, for ``bind=True``
    tasks, so its signature leaves ``self`` out)."""
    return func.run if isinstance(func, Task) else func


def _call_task(task: Task, args: list[Any], kwargs: dict[str, Any], extra: dict[str, Any]) -> Any:
    """Call a plain task as Celery's worker calls the task of a message: its ``run`` under a
    request that carries the custom headers of the run's message, so the task reads them as
    under stock beat (``self.request.periodic_task_name``, ``self.request.headers``); through
    its own ``__call__`` when its class defines one (as Celery's tracer does), whose request
    starts blank. The request stays ``called_directly``: ``self.retry()`` raises, for the job's
    retry policy, instead of sending the task a message of its own that would run unguarded."""
    headers = _message_headers()
    if not headers or task_has_custom(task, "__call__"):
        return task(*args, **kwargs, **extra)
    push_current_task(task)
    task.push_request(args=list(args), kwargs={**kwargs, **extra}, headers=headers, **headers)
    try:
        return task.run(*args, **kwargs, **extra)
    finally:
        task.pop_request()
        pop_current_task()


def _message_headers() -> dict[str, Any]:
    """The custom headers of the message being executed, if it is a run's (``RUN_TASK``): what
    Celery's request leaves once its own fields are taken out."""
    if not current_task or current_task.name != RUN_TASK:
        return {}
    return dict(current_task.request.headers or {})


def _asks_for_ctx(func: JobFunction) -> bool:
    parameter = inspect.signature(_callable_of(func)).parameters.get(CTX_PARAMETER)
    return parameter is not None and parameter.kind == inspect.Parameter.KEYWORD_ONLY


class Handlers:
    """What the registry hands work to, bound when the app is ready (``jobs.apps``): a run's
    message to the guard's runner (``run_message``), an ``@job`` function's ``.delay()`` to
    guarded calls (``apply_call``), a Django ``@task``'s call to ``jobs.django_tasks``
    (``call_django_task``). Those need the ORM and read the registry, so the registry imports
    none of them."""

    def __init__(self) -> None:
        self._bound: dict[str, Callable[..., Any]] = {}

    def bind(self, **handlers: Callable[..., Any]) -> None:
        self._bound.update(handlers)

    def get(self, name: str) -> Callable[..., Any]:
        try:
            return self._bound[name]
        except KeyError:
            raise RuntimeError(
                f"jobs is not ready: no {name} handler (is 'jobs' in INSTALLED_APPS and Django "
                "set up?)"
            ) from None


handlers = Handlers()


def _qualified(func: JobFunction) -> str:
    return f"{func.__module__}.{func.__qualname__}"


def _add_calls(func: JobFunction, name: str) -> None:
    """``func.delay(*args, **kwargs)`` and ``func.apply_async(args, kwargs, countdown=, eta=)``:
    an ad-hoc run of the job that runs ``func``, with these arguments, under its lease and
    policies, as for a guarded Celery task (``jobs.calls``)."""

    def apply_async(args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        return handlers.get("apply_call")(name, args, kwargs, options)

    def delay(*args: Any, **kwargs: Any) -> Any:
        return apply_async(args, kwargs)

    setattr(func, "apply_async", apply_async)  # noqa: B010  (a function, not a typed object)
    setattr(func, "delay", delay)  # noqa: B010


def _register_celery_task(name: str) -> None:
    def run_job(self: Any, run_id: int, **_message_meta: Any) -> dict[str, Any]:
        node = self.request.hostname or ""
        return handlers.get("run_message")(run_id, task_id=self.request.id or "", node=node)

    run_job.__name__ = run_job.__qualname__ = name.replace(".", "_")
    shared_task(name=name, bind=True, base=RunTask)(run_job)


class RunTask(Task):
    """The Celery task of every job function, and ``RUN_TASK``. A run recorded failed or lost
    raises ``RunFailed`` / ``RunLost`` once its record is written (``jobs.guard.delivery``), so
    Celery reports a failure: logged as an expected one (the runner logged the outcome) and
    acknowledged, never redelivered: the record already says what happened to the run."""

    throws = (RunFailed, RunLost)
    acks_on_failure = True
    # Acknowledged when it ends, and redelivered when its worker dies mid-run (the run record
    # then says lost or lets the redelivery finish it), whatever the project's Celery settings.
    acks_late = True
    reject_on_worker_lost = True


_register_celery_task(RUN_TASK)
