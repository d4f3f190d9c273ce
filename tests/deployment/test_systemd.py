"""deploy/systemd/ units pass ``systemd-analyze verify`` (offline: the units are copied with
their paths pointed at this checkout's virtualenv, which has the same executables), and the
worker's stop matches its warm shutdown."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
VENV_BIN = ROOT / ".venv" / "bin"


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys keep their case
    parser.read_string((UNITS / name).read_text())
    return parser


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_the_units_verify(tmp_path: Path) -> None:
    for unit in UNITS.iterdir():
        text = unit.read_text()
        text = text.replace("/opt/clusterjobs/venv/bin/", f"{VENV_BIN}/")
        text = text.replace("/opt/clusterjobs/app", str(ROOT))
        (tmp_path / unit.name).write_text(text)
    names = [
        "clusterjobs-migrate.service",
        "clusterjobs-web.service",
        "clusterjobs-beat@1.service",
        "clusterjobs-beat@2.service",
        "clusterjobs-worker@1.service",
        "clusterjobs-flower.service",
        "clusterjobs.target",
    ]
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *[f"./{name}" for name in names]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"SYSTEMD_LOG_LEVEL": "warning", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == ""  # an unknown key is only a warning


def test_every_process_has_a_unit_reading_the_environment_file() -> None:
    names = {path.name for path in UNITS.iterdir()}
    assert {
        "clusterjobs-migrate.service",
        "clusterjobs-web.service",
        "clusterjobs-beat@.service",
        "clusterjobs-worker@.service",
        "clusterjobs-flower.service",
        "clusterjobs.target",
    } <= names
    for name in names - {"clusterjobs.target"}:
        service = _unit(name)["Service"]
        assert service["EnvironmentFile"] == "/etc/clusterjobs/clusterjobs.env"
        assert service["User"] == "clusterjobs"
        if name != "clusterjobs-migrate.service":
            assert "clusterjobs-migrate.service" in _unit(name)["Unit"]["Requires"]


def test_the_worker_stops_warm_signalling_its_main_process_only() -> None:
    service = _unit("clusterjobs-worker@.service")["Service"]
    assert service["KillMode"] == "mixed"
    assert service["KillSignal"] == "SIGTERM"
    assert int(service["TimeoutStopSec"]) == 60
    assert " worker " in service["ExecStart"]
