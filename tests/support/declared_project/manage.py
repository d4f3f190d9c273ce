"""The declared project's manage.py: as in a real project, its package imports its Celery app
first (the handlers that add periodic tasks are connected by that import)."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.support.declared_project.settings")

if __name__ == "__main__":
    from django.core.management import execute_from_command_line

    import tests.support.declared_project.celery_app  # noqa: F401

    execute_from_command_line(sys.argv)
