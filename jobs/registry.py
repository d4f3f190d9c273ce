"""The registry of job functions: ``@job("name")`` makes a function schedulable.

Only registered names can be scheduled (the admin, CLI and API offer nothing else), so no form
ever accepts an arbitrary import path. Each registered job is also a Celery task of the same
name, which is what Flower shows.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from celery import Task, shared_task

from jobs.exceptions import RegistryConflict, RunFailed, RunLost, UnknownJobFunction
from jobs.schedules import Cron, Schedule, parse_duration, parse_interval

JobFunction = Callable[..., Any]
F = TypeVar("F", bound=JobFunction)

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
)


@dataclass(frozen=True)
class JobSpec:
    """A registered job function and what its declaration says about it."""

    name: str
    func: JobFunction
    schedule: Schedule | None = None
    continuous: bool = False
    policies: dict[str, Any] = field(default_factory=dict)
    lock_key: str | Callable[..., str] | None = None
    # Run as a continuous job, call the function once per this many seconds while the lease is
    # held (a step function), instead of once for the whole tenure (a loop until ctx.stopping).
    step_every: float | None = None

    @property
    def declares_job(self) -> bool:
        """Whether a Job row should exist for this function without anyone adding it."""
        return self.schedule is not None or self.continuous

    @property
    def summary(self) -> str:
        doc = inspect.getdoc(self.func) or ""
        return doc.splitlines()[0] if doc else ""


_REGISTRY: dict[str, JobSpec] = {}
# The names of the functions declared with a lock_key (kept as they register: every claim asks).
_KEYED: set[str] = set()


def job(
    name: str,
    *,
    every: str | int | timedelta | None = None,
    cron: str | None = None,
    tz: str = "UTC",
    continuous: bool = False,
    lock_key: str | Callable[..., str] | None = None,
    step_every: str | int | float | timedelta | None = None,
    **policies: Any,
) -> Callable[[F], F]:
    """Register ``func(ctx, *args, **kwargs)`` as the job function ``name``.

    With ``every=`` or ``cron=`` (or ``continuous=True``) a job of the same name is created in the
    database on migrate; an operator may pause it or override its schedule in the admin.
    With ``step_every=`` (e.g. ``"2s"``), a continuous job of this function calls it once per
    step for as long as it holds its lease; without it, the function is called once per tenure
    and loops until ``ctx.stopping`` is set.
    """
    unknown = set(policies) - set(POLICY_FIELDS)
    if unknown:
        raise TypeError(f"@job({name!r}): unknown option(s) {sorted(unknown)}")
    if sum(x is not None for x in (every, cron)) + continuous > 1:
        raise TypeError(f"@job({name!r}): give at most one of every=, cron=, continuous=True")
    if "/" in name and (every is not None or cron is not None or continuous):
        # The job it declares would be one no API URL can reach (see models.NO_SLASH_IN_NAME).
        raise TypeError(f"@job({name!r}): a job's name cannot contain '/'")
    step_seconds = None if step_every is None else parse_duration(step_every).total_seconds()
    if step_seconds is not None and step_seconds <= 0:
        raise TypeError(f"@job({name!r}): step_every must be positive")
    schedule: Schedule | None = None
    if every is not None:
        schedule = parse_interval(every)
    elif cron is not None:
        schedule = Cron(expr=cron, tz=tz)

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
            policies=dict(policies),
            lock_key=lock_key,
            step_every=step_seconds,
        )
        existing = _REGISTRY.get(name)
        if existing is not None and _qualified(existing.func) != _qualified(func):
            raise RegistryConflict(
                f"job name {name!r} is registered twice: {_qualified(existing.func)} "
                f"and {_qualified(func)}"
            )
        _REGISTRY[name] = spec
        _KEYED.discard(name)
        if lock_key is not None:
            _KEYED.add(name)
        _register_celery_task(name)
        return func

    return register


def get(name: str) -> JobSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownJobFunction(
            f"{name!r} is not a registered job function; known: {', '.join(names()) or 'none'}"
        ) from None


def names() -> list[str]:
    return sorted(_REGISTRY)


def specs() -> list[JobSpec]:
    return [_REGISTRY[name] for name in names()]


def keyed_names() -> frozenset[str]:
    """The functions whose lock key comes from their arguments (each run's claim asks)."""
    return frozenset(_KEYED)


def is_registered(name: str) -> bool:
    return name in _REGISTRY


def _qualified(func: JobFunction) -> str:
    return f"{func.__module__}.{func.__qualname__}"


def _register_celery_task(name: str) -> None:
    def run_job(self: Any, run_id: int, **_message_meta: Any) -> dict[str, Any]:
        # Imported here: the runner needs the ORM, which is not ready while job modules import.
        from jobs.delivery import report
        from jobs.runner import execute_run

        node = self.request.hostname or ""
        return report(execute_run(run_id, task_id=self.request.id or "", node=node))

    run_job.__name__ = run_job.__qualname__ = name.replace(".", "_")
    shared_task(name=name, bind=True, base=RunTask)(run_job)


class RunTask(Task):
    """The Celery task of every job function. A run recorded failed or lost raises ``RunFailed``
    / ``RunLost`` once its record is written (``jobs.delivery``), so Celery reports a failure:
    logged as an expected one (the runner logged the outcome) and acknowledged, never
    redelivered: the record already says what happened to the run."""

    throws = (RunFailed, RunLost)
    acks_on_failure = True
