"""``celery control revoke`` is an operator's cancel: the revoked run is recorded ``cancelled``
(``jobs.services.cancel_run``, audited), never re-published, and holds no lease.

Celery keeps revoked task ids in each worker's memory only, and a run's task id is its own
(``jobs.broker.messages.task_id_for``), so without a record in the database maintenance would
re-publish a revoked run that was still queued until its deadline, and a terminated run would
keep its lease until maintenance found it ``lost``. Both ends are the worker's main process:

- the ``revoke`` command itself (every worker the broadcast reaches): a run no worker claimed
  yet is cancelled at once, even while its message waits behind a busy queue;
- ``task_revoked``: a revoked message reaching a worker (an id the worker learned later, or one
  revoked by stamped header) cancels its run if still unclaimed; with ``--terminate`` the pool
  process running it has just been sent its signal and cannot write, so its run is cancelled
  here with the token the database holds for it, and its lease given back.

A revoke without ``--terminate`` of a run already running does not stop it (as in Celery); it
ends with its own outcome. An expired message is not a cancel (maintenance records it missed).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

from celery.utils.functional import maybe_list
from django.db import DatabaseError, connection

from jobs.audit import Actor
from jobs.broker import messages

log = logging.getLogger(__name__)

_WRAPPED = "_jobs_cancels_runs"


def install_revoke_command(**_signal: Any) -> None:
    """At ``worker_init``: make the worker's ``revoke`` command also cancel the runs it names."""
    from celery.worker.control import Panel

    revoke = Panel.data["revoke"]
    if not getattr(revoke, _WRAPPED, False):
        # The pidbox node dispatches through this very dict, so the wrapper is what it calls.
        Panel.data["revoke"] = cancelling(revoke)


def cancelling(revoke: Callable[..., Any]) -> Callable[..., Any]:
    """Celery's ``revoke`` command, then each named run cancelled if no worker claimed it."""

    def revoke_and_cancel(state: Any, task_id: Any, **arguments: Any) -> Any:
        reply = revoke(state, task_id, **arguments)  # first: the worker then discards its message
        node = str(getattr(getattr(state, "consumer", None), "hostname", ""))
        for each in maybe_list(task_id) or ():
            run_id = messages.run_id_of(str(each))
            if run_id is not None:
                _record(run_id, node=node, terminated=False, signum=None)
        return reply

    setattr(revoke_and_cancel, _WRAPPED, True)
    return revoke_and_cancel


def on_task_revoked(
    sender: Any = None,
    request: Any = None,
    terminated: bool = False,
    signum: Any = None,
    expired: bool = False,
    **_signal: Any,
) -> None:
    """``task_revoked`` in the worker's main process: cancel the revoked message's run."""
    if expired or request is None:
        return
    run_id = messages.run_id_of(getattr(request, "id", None))
    if run_id is None:
        return
    node = str(getattr(request, "hostname", "") or "")
    _record(run_id, node=node, terminated=bool(terminated), signum=signum)


def reason(*, terminated: bool, signum: Any) -> str:
    if terminated:
        return (
            f"revoked with terminate ({signal_name(signum)}): celery control revoke stopped it "
            "while it ran"
        )
    return "revoked: celery control revoke cancelled it before it started"


def signal_name(signum: Any) -> str:
    """``SIGTERM`` for 15 (Celery passes the number, or the text of ``Terminated(15)``)."""
    try:
        return signal.Signals(int(str(signum))).name
    except ValueError:
        return str(signum)


def _record(run_id: int, *, node: str, terminated: bool, signum: Any) -> None:
    # On a thread: the main process's event loop (consuming, heartbeats) must not wait on the
    # database, and Django's connection is per thread.
    thread = threading.Thread(
        target=_cancel,
        args=(run_id, node, terminated, signum),
        name=f"jobs-revoke-{run_id}",
        daemon=True,
    )
    thread.start()


def _cancel(run_id: int, node: str, terminated: bool, signum: Any) -> None:
    from jobs.services import cancel_run  # the services import the guard's modules

    fields: dict[str, Any] = {"action": "run_revoked", "run_id": run_id, "node": node}
    noted: dict[str, Any] = {"node": node, "terminated": terminated}
    if terminated:
        noted["signal"] = signal_name(signum)
    try:
        run = cancel_run(
            run_id,
            actor=Actor.celery_control("revoke"),
            reason=reason(terminated=terminated, signum=signum),
            running=terminated,
            **noted,
        )
        if run is not None:
            log.warning("run %s revoked: recorded cancelled", run_id, extra=fields)
    except DatabaseError:
        log.exception(
            "could not record a revoked run cancelled; a queued one runs no more on this "
            "worker, a terminated one is recorded lost once its lease lapses",
            extra=fields,
        )
    finally:
        connection.close()
