"""Django's Tasks framework (DEP 14, ``django.tasks`` in Django 6.0) on the cluster.

``ClusterTaskBackend`` (``jobs.django_tasks.backend``) runs ``@task`` functions as guarded runs
on the Celery workers, and a job may run such a task on a schedule like any registered task.
``guarded`` declares a task's lock key and its job's policies. See docs/tasks.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from jobs import registry

T = TypeVar("T")


def guarded(
    *, lock_key: str | Callable[..., str] | None = None, **policies: Any
) -> Callable[[T], T]:
    """Declare, over a Django ``@task`` of our backend, the lock key its runs share (a format
    string over its arguments, by name or position, or a callable taking them; as
    ``GuardedTask``'s) and the policies of the job its ``enqueue()`` runs belong to (as
    ``@job``'s: ``overlap="wait"``, ``on_lost="retry"``, ``max_retries=3``, ...), applied when
    that job is made on the first enqueue::

        @guarded(lock_key="sync:{city}", overlap="wait")
        @task
        def sync(city): ...

    Without a lock key, each enqueued run takes a lease of its own: runs of the task go side by
    side, each fenced and recorded lost if its worker dies. With one, runs of one key go one at
    a time and the job's overlap policy settles the others.
    """

    def declare(task: T) -> T:
        name = getattr(task, "module_path", None)
        if name is None or not registry.is_django_task(name):
            raise TypeError(
                f"guarded() goes over a Django @task whose backend is "
                f"jobs.django_tasks.backend.ClusterTaskBackend, not {task!r}"
            )
        registry.declare_django_task(name, lock_key=lock_key, policies=policies)
        return task

    return declare
