"""The documentation's generated references (devtools/docs_reference.py, mkdocs.yml's hook):
they are made from the code, and refuse a variable the code reads that no meaning describes."""

from __future__ import annotations

import pytest

from devtools import docs_reference
from devtools.docs_reference import (
    StaleReference,
    configuration_reference,
    settings_variables,
)
from jobs.conf import DEFAULTS
from jobs.management.commands.jobs import VERBS


def test_the_settings_variables_are_read_from_the_source() -> None:
    source = """
A = env.float("JOBS_X", default=0.5, minimum=0.1)
B = env.str("JOBS_Y", "plain") or "plain"
C = env.required("JOBS_Z", "hint")
D = {s: env.str(f"JOBS_R_{s.upper()}", d) for s, d in (("a", "1"),)}
E = env.bool("JOBS_B", default=True)
"""
    found = {variable.name: variable for variable in settings_variables(source)}
    assert list(found) == ["JOBS_X", "JOBS_Y", "JOBS_Z", "JOBS_R_<S>", "JOBS_B"]
    assert (found["JOBS_X"].kind, found["JOBS_X"].default) == ("float", "`0.5`")
    assert found["JOBS_X"].minimum == "`0.1`"
    assert found["JOBS_Y"].default == "`plain`"
    assert found["JOBS_Z"].default == "required"
    assert found["JOBS_R_<S>"].default == ""  # computed per status
    assert found["JOBS_B"].default == "`1`"


def test_the_configuration_reference_covers_every_variable_and_setting() -> None:
    page = configuration_reference()
    for variable in settings_variables():
        assert f"| `{variable.name}` |" in page
    for setting in DEFAULTS:
        assert f"| `{setting}` |" in page


def test_a_variable_without_a_meaning_fails_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    meanings = dict(docs_reference.MEANINGS)
    del meanings["JOBS_LOG_FORMAT"]
    monkeypatch.setattr(docs_reference, "MEANINGS", meanings)
    with pytest.raises(StaleReference, match="reads JOBS_LOG_FORMAT"):
        configuration_reference()


def test_the_cli_reference_has_every_verb() -> None:
    page = docs_reference.cli_reference()
    for verb in VERBS:
        assert f"### `jobs {verb}`" in page
    assert "#### `jobs blackout add`" in page
