"""Seeded fault schedules against a real cluster (tests/nemesis/harness.py), then the checker.

In the suite: two fixed seeds of about two minutes each, side by side with the other scenarios
(each has its own database, its own Redis on a free port, its own directories).
``make nemesis MINUTES=30 SEED=...`` runs the same test for as long, with that seed
(``NEMESIS_MINUTES``, ``NEMESIS_SEED``), keeping its history under ``NEMESIS_HISTORY``
(``make nemesis``: under ``.dev/nemesis/``); a failure prints the seed that replays it.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from tests.acceptance.conftest import Cluster
from tests.nemesis.harness import CALM, nemesis

pytestmark = pytest.mark.nemesis

SUITE_SEEDS = [20261127, 31]
SEEDS = [int(os.environ["NEMESIS_SEED"])] if os.environ.get("NEMESIS_SEED") else SUITE_SEEDS
MINUTES = float(os.environ.get("NEMESIS_MINUTES") or 2)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_seeded_fault_schedule_breaks_no_guarantee(
    cluster: Cluster, tmp_path: Path, seed: int
) -> None:
    faulty = max(MINUTES * 60 - CALM, 30.0)
    when = time.strftime("%Y%m%dT%H%M%S")
    history = Path(os.environ.get("NEMESIS_HISTORY") or tmp_path) / f"seed-{seed}-{when}"
    history.mkdir(parents=True)
    with nemesis(cluster, history, seed, faulty) as run:
        run.inject()
        run.calm()
        figures = run.check()
    # Every process's log goes with the history: pytest keeps only its last few temporary
    # folders, and a violation is read from these logs long after.
    shutil.copytree(cluster.logs, history / "logs", dirs_exist_ok=True)
    print(f"\nnemesis {figures.summary()}\nhistory: {history} (with every process's log)")
    assert not figures.violations, f"{figures.summary()}\n{figures.report}"
