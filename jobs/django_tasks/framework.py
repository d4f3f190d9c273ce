"""Django's Tasks framework (``django.tasks``, Django 6.0 and later), where this Django has it.

On Django 5.2 ``AVAILABLE`` is false and nothing here is usable: the modules of
``jobs.django_tasks`` still import, so a project on 5.2 starts and passes its checks, and only a
``TASKS`` setting naming our backend says (``ImproperlyConfigured``) that it needs Django 6.
Typed ``Any``: Django 5.2's stubs, which mypy checks against, have no ``django.tasks``.
"""

from __future__ import annotations

from typing import Any

tasks: Any
BaseTaskBackend: Any
# Django's rule for a task's arguments and return value (django.utils.json, Django 6.0).
normalize_json: Any
try:
    import django.tasks.backends.base as _backends  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # Django 5.2
    AVAILABLE = False
    tasks = None
    BaseTaskBackend = object
    normalize_json = None
else:
    import django.tasks  # type: ignore[import-not-found,unused-ignore]
    import django.utils.json as _json  # type: ignore[import-not-found,unused-ignore]

    AVAILABLE = True
    tasks = django.tasks
    BaseTaskBackend = _backends.BaseTaskBackend
    normalize_json = _json.normalize_json
