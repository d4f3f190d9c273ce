"""What ``@job`` refuses before anything is registered."""

from __future__ import annotations

import pytest

from jobs import registry


def test_a_declared_job_name_with_a_slash_is_refused_at_import() -> None:
    with pytest.raises(TypeError, match="a job's name cannot contain '/'"):
        registry.job("reports/nightly", every="1h")
    assert not registry.is_registered("reports/nightly")
