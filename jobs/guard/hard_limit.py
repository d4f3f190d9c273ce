"""A run killed by its hard time limit is recorded ``failed`` at once, saying why, and gives its
lease back, so the job's next slot does not wait for the lease to lapse (nor the run for
maintenance to call it ``lost``).

More in docs/architecture.md, "Module notes".
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery.exceptions import TimeLimitExceeded
from django.db import DatabaseError, connection
from kombu.asynchronous import get_event_loop

from jobs import registry
from jobs.guard import run_records
from jobs.models import JobRun, RunStatus

log = logging.getLogger(__name__)

_lock = threading.Lock()
_pending: set[int] = set()  # runs being recorded (the signal comes twice per timeout)


def on_task_failure(
    sender: Any = None,
    exception: BaseException | None = None,
    kwargs: dict[str, Any] | None = None,
    **_signal: Any,
) -> None:
    """``task_failure`` in the worker's main process: act on a job run's hard time limit."""
    if not isinstance(exception, TimeLimitExceeded) or not kwargs or "run_id" not in kwargs:
        return
    if not registry.carries_runs(getattr(sender, "name", "")):
        return  # a plain Celery task with a run_id argument: not ours
    run_id = int(kwargs["run_id"])
    limit = exception.args[0] if exception.args else "?"
    with _lock:
        if run_id in _pending:
            return
        _pending.add(run_id)
    thread = threading.Thread(
        target=_record, args=(run_id, limit), name=f"jobs-hard-limit-{run_id}", daemon=True
    )
    hub = get_event_loop()
    if hub is None:
        thread.start()
    else:
        # The pool kills the process right after this signal returns: record after that.
        hub.call_soon(thread.start)


def reason(limit: object) -> str:
    return f"hard time limit of {limit} s exceeded: the worker killed the process running it"


def _record(run_id: int, limit: object) -> None:
    fields: dict[str, Any] = {"action": "hard_time_limit", "run_id": run_id}
    try:
        run = (
            JobRun.objects.filter(pk=run_id, status=RunStatus.RUNNING)
            .values("fencing_token", "lease_key", "job__min_hold", "job__name")
            .first()
        )
        if run is None:
            return  # recorded meanwhile (its own finish, or maintenance)
        fields["job"] = run["job__name"]
        if run["fencing_token"] is None:
            finished = run_records.finish_unleased(
                run_id, status=RunStatus.FAILED, error=reason(limit)
            )
        else:
            fields.update(key=run["lease_key"], token=run["fencing_token"])
            finished = run_records.finish_fenced(
                run_id,
                key=run["lease_key"],
                token=run["fencing_token"],
                status=RunStatus.FAILED,
                error=reason(limit),
                min_hold=run["job__min_hold"],
            )
        log.warning(
            "run killed by its hard time limit of %s s: %s",
            limit,
            finished.status or "already recorded",
            extra={**fields, "status": finished.status},
        )
    except DatabaseError:
        log.exception(
            "could not record a run killed by its hard time limit; maintenance records it "
            "lost once its lease lapses",
            extra=fields,
        )
    finally:
        connection.close()
        with _lock:
            _pending.discard(run_id)
