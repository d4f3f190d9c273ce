"""The app's wheel as another project installs it, built from a copy of the sources."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_wheel(folder: Path) -> Path:
    """Build the wheel from a copy of the sources (an in-tree build would leave build/ and
    *.egg-info/ in the checkout), into ``folder``; its path."""
    source = folder / "source"
    source.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "jobs", source / "jobs", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(folder), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = folder.glob("clusterjobs-*.whl")
    return wheel
