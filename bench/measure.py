"""What the benchmarks share to measure: nearest-rank percentiles, start stamps that the
functions under test append to a log file (one ``write`` each, safe across processes), and the
CPU time processes on this machine have used."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


def append_stamp(log: str, *fields: str) -> None:
    """Append ``fields`` and the time now (Unix seconds) as one line to ``log``."""
    line = " ".join([*fields, f"{time.time():.6f}"]) + "\n"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds the processes ``pids`` have used so far (from ``/proc``: they
    run on this machine); a process gone meanwhile counts nothing."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")
