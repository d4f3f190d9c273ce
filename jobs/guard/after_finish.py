"""What a run's end sets going beyond its own record. The features that follow an end register here
(jobs.workflow.dependencies: the runs it made for the jobs after it; jobs.workflow.backfill: the
job's next backfill run), so the runner calls them without knowing them. Each is a head start on
what maintenance would do anyway: one that fails is logged, and maintenance does it later."""

from __future__ import annotations

import logging
from collections.abc import Callable

from jobs.guard.run_records import Claim

log = logging.getLogger(__name__)

AfterEnd = Callable[[Claim], None]

_hooks: dict[str, AfterEnd] = {}


def register(what: str, hook: AfterEnd) -> None:
    """Call ``hook`` with the claim of every run that ended (ran, or was recorded missed or
    skipped when claimed); ``what`` names it in the log. Registering a name again replaces it."""
    _hooks[what] = hook


def run_ended(claim: Claim) -> None:
    for what, hook in _hooks.items():
        try:
            hook(claim)
        except Exception:
            log.exception(
                "%s failed; maintenance will",
                what,
                extra={"action": "after_end_failed", "job": claim.job.name},
            )
