"""What the benchmarks share to measure: nearest-rank percentiles, and start stamps that the
functions under test append to a log file (one ``write`` each, safe across processes)."""

from __future__ import annotations

import os
import time


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
