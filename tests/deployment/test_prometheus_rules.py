"""The alerting rules shipped beside the compose file (docker/prometheus/alerts.yml) are valid
for Prometheus and fire on the series they are for: Prometheus' own promtool checks them
(``make test`` installs Debian's prometheus package for it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

RULES_DIR = Path(__file__).resolve().parents[2] / "docker" / "prometheus"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    path = shutil.which("promtool")
    assert path is not None, "promtool is missing: `make test` installs Debian's prometheus"
    return subprocess.run(
        [path, *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=60, check=False
    )


def test_the_rules_are_valid() -> None:
    result = promtool("check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 9 rules found" in result.stdout


def test_the_rules_fire_on_their_series() -> None:
    result = promtool("test", "rules", "alerts_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
