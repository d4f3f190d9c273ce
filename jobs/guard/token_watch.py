"""A fencing token that went backwards: the database forgot commits, and this process stops.

A lease's token only grows: every acquisition adds one, in the same statement that takes it. A
worker process that is handed a token no higher than one it already held on the same key is
talking to a database that lost commits it had acknowledged: a failover to a standby that had
not received them (asynchronous replication, docs/failover.md), or a restore from a backup. The
tokens it hands out again were used by runs that already executed, so fencing no longer tells
an old holder from a new one, and runs the database forgot may run again.

Each worker process remembers the highest token it held per key (the most recent
``REMEMBERED_KEYS`` keys). The first time a claim or a lease take returns a token at or below
that, the process logs one error (``action=fencing_token_regressed``), records the problem for
``/healthz`` (``ConfigurationProblem``, cause ``database_went_back``, refreshed at most once a
minute while it lasts) and from then on runs no job function: every run it is handed is recorded
``failed`` with the reason, never executed, until the process is restarted after an operator
checked the database (docs/failover.md says what to do).

It sees only what this process held: a key it never held, or a regression smaller than what it
saw, goes unnoticed. Synchronous replication is the prevention; this is the alarm.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

from django.db import connection

from jobs.database import pooler_hint
from jobs.process import process_state
from jobs.process.process_state import ProcessState

log = logging.getLogger(__name__)

CAUSE = "database_went_back"
REMEMBERED_KEYS = 10_000
RECORD_EVERY_SECONDS = 60.0
ADVICE = (
    "the database handed out a fencing token no higher than one this worker already held: it "
    "lost acknowledged commits (a failover to an asynchronous standby, or a restore). This "
    "worker runs no job until it is restarted; see docs/failover.md, 'After an asynchronous "
    "failover'"
)


class _State(ProcessState):
    def __init__(self) -> None:
        super().__init__()
        self.highest: OrderedDict[str, int] = OrderedDict()
        self.regressed: str | None = None  # what was seen, once it was


_state = _State()


def _this_process() -> _State:
    global _state
    _state = process_state.mine(_state, _State)  # a forked pool process watches for itself
    return _state


def halted() -> str | None:
    """Why this process runs no job (the regression it saw), or ``None``."""
    state = _this_process()
    if state.regressed is not None:
        _record(state)
    return state.regressed


def observe(key: str, token: int) -> str | None:
    """Note that this process now holds ``key`` with ``token``; the reason this process must
    not act when the token went backwards (then or before), else ``None``."""
    state = _this_process()
    first = False
    with state.lock:
        held = state.highest.get(key)
        if held is not None and token <= held and state.regressed is None:
            state.regressed = (
                f"lease {key} was handed token {token} after this process had held token {held}"
            )
            first = True
        if held is None or token > held:
            state.highest[key] = token
        state.highest.move_to_end(key)
        while len(state.highest) > REMEMBERED_KEYS:
            state.highest.popitem(last=False)
    if first:
        log.error(
            "%s: %s",
            ADVICE,
            state.regressed,
            extra={"action": "fencing_token_regressed", "key": key, "token": token, "held": held},
        )
    if state.regressed is not None:
        _record(state)
    return state.regressed


def _record(state: _State) -> None:
    if state.record_due(RECORD_EVERY_SECONDS) and connection.vendor == "postgresql":
        settings: dict[str, Any] = connection.settings_dict
        pooler_hint.record_problem(settings, CAUSE, f"{ADVICE} ({state.regressed})")


def reset() -> None:
    """Forget everything (tests)."""
    global _state
    _state = _State()
