"""The wheel another project installs: the `jobs` app alone, with what it needs to run."""

from __future__ import annotations

import email
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.wheel import build_wheel

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    with zipfile.ZipFile(build_wheel(tmp_path_factory.mktemp("wheel"))) as built:
        yield built


def test_the_wheel_carries_the_app_and_nothing_else(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    top = {name.split("/")[0] for name in names if not name.startswith("clusterjobs-")}
    assert top == {"jobs"}, "project/, tests/, devtools/, bench/ stay out"
    migrations = sorted(ROOT.joinpath("jobs/migrations").glob("0*.py"))
    assert migrations and all(f"jobs/migrations/{m.name}" in names for m in migrations)
    # The SQL the migrations run (frozen) and the current text of the functions (jobs/sql).
    sql = sorted(ROOT.joinpath("jobs").rglob("*.sql"))
    assert sql and all(f"jobs/{s.relative_to(ROOT / 'jobs')}" in names for s in sql)
    templates = sorted(ROOT.joinpath("jobs/templates").rglob("*.html"))
    for template in templates:
        assert f"jobs/{template.relative_to(ROOT / 'jobs')}" in names
    commands = sorted(ROOT.joinpath("jobs/management/commands").glob("*.py"))
    assert all(f"jobs/management/commands/{c.name}" in names for c in commands)
    assert "jobs/urls.py" in names and "jobs/apps.py" in names


def test_its_metadata_declares_lower_bounds_and_no_python_ceiling(
    wheel: zipfile.ZipFile,
) -> None:
    (metadata_name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    metadata = email.message_from_bytes(wheel.read(metadata_name))
    assert metadata["Requires-Python"] == ">=3.11"
    required = [r for r in metadata.get_all("Requires-Dist") or [] if "extra ==" not in r]
    names = {re.split(r"[<>=\[ ]", r, maxsplit=1)[0].lower() for r in required}
    assert {"django", "celery", "django-celery-beat", "psycopg", "croniter"} <= names
    assert all(">=" in r for r in required), required
    # The platform's web server and Flower are this repository's, not the app's.
    assert not names & {"flower", "gunicorn", "whitenoise", "dj-database-url"}
