"""The Celery (and web) processes a benchmark starts: each in a session of its own, its output in
a log file of its own, stopped as a group (SIGTERM, then SIGKILL after a grace period); and the
polling a benchmark does while they work (``wait_until``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# ``celery -A project`` with this interpreter: prepend to a beat's or a worker's arguments.
CELERY = [sys.executable, "-m", "celery", "-A", "project"]


@dataclass
class Processes:
    env: dict[str, str]
    logs: Path
    grace: float = 30.0  # seconds a process has to stop after SIGTERM before it is killed
    running: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        out = (self.logs / f"{name}.log").open("wb")
        self.running[name] = subprocess.Popen(
            argv, env={**self.env, **(env or {})}, cwd=ROOT, stdout=out,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        out.close()

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def stop(self, *names: str) -> None:
        # All are told first, so that they stop side by side rather than one grace after another.
        chosen = [self.running.pop(name) for name in names if name in self.running]
        for process in chosen:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in chosen:
            try:
                process.wait(self.grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def stop_all(self) -> None:
        self.stop(*list(self.running))


def wait_until(condition: Callable[[], bool], timeout: float, what: str, poll: float = 0.2) -> None:
    """Poll ``condition`` every ``poll`` seconds until true; ``TimeoutError(what)`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(poll)
