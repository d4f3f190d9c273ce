from __future__ import annotations

import importlib
from typing import Any

from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured
from django.db.backends.signals import connection_created
from django.db.models.signals import post_migrate
from django.utils.module_loading import autodiscover_modules


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from jobs.conf import get_alerts_conf, get_conf, get_ops_conf, get_run_log_conf

        conf = get_conf()  # validates the JOBS_* settings now, not at first use
        get_ops_conf()  # the operations settings (health, metrics, retention), likewise
        get_alerts_conf()  # where alerts go, likewise
        get_run_log_conf()  # what a run's own log keeps, likewise
        # Every installed app's `jobs` module registers its job functions (ours has none).
        autodiscover_modules("jobs")
        for module in conf.modules:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise ImproperlyConfigured(
                    f"JOBS_MODULES names {module!r}, which cannot be imported: {exc}"
                ) from exc
        # The system checks, and what follows a run's end (jobs.guard.after_finish), register
        # themselves.
        from jobs import checks  # noqa: F401
        from jobs.beat.entries import read_time_zones_leniently
        from jobs.workflow import backfill, dependencies  # noqa: F401

        read_time_zones_leniently()

        post_migrate.connect(_sync_after_migrate, sender=self)
        # A transaction pooler without DATABASE_POOLER=transaction says so
        # (jobs.database.pooler_hint).
        from jobs.database.pooler_hint import install

        connection_created.connect(install, dispatch_uid="jobs.database.pooler_hint")
        _bind_registry_handlers()
        # A worker's node heartbeat and continuous-job supervisor (its main process only).
        from jobs.process.worker_signals import connect_worker_signals

        connect_worker_signals()


def _bind_registry_handlers() -> None:
    """Who does the work the registry hands over (``jobs.registry.Handlers``)."""
    from jobs import registry
    from jobs.calls import Caller, apply
    from jobs.django_tasks.execution import call_task
    from jobs.guard.delivery import report
    from jobs.guard.runner import execute_run

    def run_message(run_id: int, *, task_id: str, node: str) -> Any:
        return report(execute_run(run_id, task_id=task_id, node=node))

    def apply_call(name: str, args: Any, kwargs: Any, options: dict[str, Any]) -> Any:
        return apply(Caller(name), args, kwargs, options)

    registry.handlers.bind(
        run_message=run_message, apply_call=apply_call, call_django_task=call_task
    )


def _sync_after_migrate(**_kwargs: Any) -> None:
    from jobs.beat.declared_jobs import sync_declared_jobs

    sync_declared_jobs()
