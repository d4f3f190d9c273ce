"""The platform's settings plus Django's own database backend, django-tasks-db, as the ``TASKS``
alias ``db`` (its app installed): for ``bench.django_tasks_bench`` and the workers it starts
only. Django 6 (and ``requirements/dev-django6.txt``) only."""

from project.settings import *  # noqa: F403
from project.settings import INSTALLED_APPS, TASKS

INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks_db"]
TASKS = {**TASKS, "db": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
