"""Scheduled jobs that run exactly once per schedule across a cluster.

Job code: ``from jobs import job``, then ``@job("billing.close_day")`` on
``def close_day(ctx): ...``. A plain Celery task whose ``.delay()`` calls share its job's lease:
``@shared_task(base=GuardedTask)`` (``from jobs import GuardedTask``, see ``jobs.calls``).
"""

from typing import Any

from jobs.registry import job

__all__ = ["GuardedTask", "job"]


def __getattr__(name: str) -> Any:
    # Lazily: jobs.calls needs the models, which cannot load while Django imports this app.
    if name == "GuardedTask":
        from jobs.calls import GuardedTask

        return GuardedTask
    raise AttributeError(f"module 'jobs' has no attribute {name!r}")
