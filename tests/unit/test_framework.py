"""``jobs.django_tasks`` on both Djangos the suite runs: its modules import on Django 5.2, which
has no ``django.tasks``, and the backend then says what it needs; a task's priority maps onto a
job's in proportion."""

from __future__ import annotations

import importlib

import pytest
from django.core.exceptions import ImproperlyConfigured

from jobs.django_tasks import framework
from jobs.django_tasks.backend import ClusterTaskBackend, job_priority


@pytest.mark.parametrize("module", ["backend", "results", "execution", "framework"])
def test_every_module_imports_on_this_django(module: str) -> None:
    importlib.import_module(f"jobs.django_tasks.{module}")


def test_without_django_tasks_the_backend_says_it_needs_django_6() -> None:
    if framework.AVAILABLE:
        pytest.skip("this Django has django.tasks (tests/integration/test_backend.py)")
    with pytest.raises(ImproperlyConfigured, match=r"needs Django 6\.0's django\.tasks"):
        ClusterTaskBackend("default", {})


def test_priorities_map_in_proportion_onto_a_jobs() -> None:
    assert [job_priority(p) for p in (-100, -50, -1, 0, 1, 50, 100)] == [0, 2, 4, 4, 5, 7, 9]
