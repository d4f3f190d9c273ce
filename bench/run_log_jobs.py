"""The job ``bench.run_log_bench`` runs (imported through JOBS_MODULES, so it is registered once,
not again as ``__main__``)."""

from __future__ import annotations

import logging
from typing import Any

from jobs import job

talker = logging.getLogger("bench.talk")


@job("bench.talk")
def talk(ctx: Any, lines: int) -> None:
    """Logs ``lines`` lines, the work of nothing else."""
    for number in range(lines):
        talker.info("bench line %d of run %s", number, ctx.run_id)
