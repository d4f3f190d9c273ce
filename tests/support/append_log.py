"""Append-only log files the job functions under test write, one line per event, so a test can
count executions independently of the run table."""

from __future__ import annotations

import os


def append_line(path: str, line: str) -> None:
    # O_APPEND writes of one short line are atomic across processes on Linux.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
