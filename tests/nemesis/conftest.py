"""The nemesis tier runs on the acceptance tier's cluster of real processes.

Its marker is registered here, next to it (``--strict-markers``): ``nemesis`` selects the tier
(``-m nemesis``, or ``-m "not nemesis"`` to leave it out).
"""

from __future__ import annotations

import pytest

from tests.acceptance.conftest import cluster

__all__ = ["cluster"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "nemesis: seeded faults against a real cluster, then a history checker"
    )
