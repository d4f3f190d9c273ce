from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from project.env import Env


def test_required_names_the_variable() -> None:
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL is not set"):
        Env({}).required("DATABASE_URL", "hint")


@pytest.mark.parametrize(("raw", "value"), [("1", True), ("off", False), ("TRUE", True)])
def test_bool(raw: str, value: bool) -> None:
    assert Env({"DJANGO_DEBUG": raw}).bool("DJANGO_DEBUG", default=False) is value


def test_bad_bool_names_the_variable() -> None:
    with pytest.raises(ImproperlyConfigured, match="DJANGO_DEBUG='maybe'"):
        Env({"DJANGO_DEBUG": "maybe"}).bool("DJANGO_DEBUG", default=False)


def test_int_and_float_validate_range() -> None:
    assert Env({"X": "5"}).int("X", default=1, minimum=1) == 5
    with pytest.raises(ImproperlyConfigured, match="X=0 must be at least 1"):
        Env({"X": "0"}).int("X", default=1, minimum=1)
    with pytest.raises(ImproperlyConfigured, match="JOBS_BEAT_MAX_INTERVAL='soon'"):
        Env({"JOBS_BEAT_MAX_INTERVAL": "soon"}).float("JOBS_BEAT_MAX_INTERVAL", default=1.0)


def test_list_splits_on_commas() -> None:
    assert Env({"JOBS_MODULES": "a.jobs, b.jobs,,"}).list("JOBS_MODULES") == ["a.jobs", "b.jobs"]
    assert Env({}).list("JOBS_MODULES") == []
