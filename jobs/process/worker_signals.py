"""A ``celery worker``'s main process: its node row and heartbeat, and the supervisor of
continuous jobs. Connected to Celery's worker signals from ``JobsConfig.ready()``; they fire in
the worker's main process only (never in pool processes, beats or web processes), except
``worker_process_init``, which ``jobs.guard.shutdown_notice`` uses in each pool process.

- ``worker_init``: the defence against a worker exiting when its Redis broker restarts
  (``jobs.broker.broker_restart``);
- ``worker_ready``: register the node, start the heartbeat and supervisor threads, and the
  alert sender (which also looks for a cluster without a live beat, ``jobs.alerts.detect``);
- ``worker_shutting_down`` (the SIGTERM/SIGINT/SIGQUIT handler): ask the supervisor to stop.
  It only sets events, so the handoff starts at once while Celery waits for running tasks;
- ``worker_shutdown`` and interpreter exit: wait (bounded) for the continuous jobs to hand back
  their leases and the node to be marked stopped;
- ``task_failure`` with Celery's ``TimeLimitExceeded`` (sent by the main process when the pool
  kills a run at its hard time limit): record the run failed and release its lease
  (``jobs.guard.hard_limit``);
- ``worker_init`` and ``task_revoked``: ``celery control revoke`` records the run cancelled
  (``jobs.guard.revocation``).
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
from typing import Any

import celery
from celery import signals

from jobs.alerts.detect import ClusterWatch
from jobs.alerts.sender import AlertSender
from jobs.broker import broker_restart
from jobs.conf import get_conf, get_ops_conf
from jobs.continuous.nodes import NodeHeartbeat, NodeInfo
from jobs.continuous.supervisor import SHUTDOWN_GRACE, Supervisor
from jobs.database import connection_budget
from jobs.guard import hard_limit, revocation, shutdown_notice
from jobs.guard.runner import refuse_unknown_task

log = logging.getLogger(__name__)

# Beyond the supervisor's own grace: marking the node stopped and recording the tenures.
_JOIN_SLACK = 5.0

_running: list[Supervisor] = []
_senders: list[AlertSender] = []


def connect_worker_signals() -> None:
    # A worker keeps a connection per thread: no pool (jobs.database.connection_budget).
    signals.worker_init.connect(
        _refuse_pool, weak=False, dispatch_uid="jobs.database.connection_budget.worker"
    )
    # A Redis broker restart must not stop the worker (jobs.broker.broker_restart).
    signals.worker_init.connect(
        broker_restart.install, weak=False, dispatch_uid="jobs.broker.broker_restart"
    )
    # The shutdown notice first: its pipe must exist before the pool forks.
    signals.worker_init.connect(
        shutdown_notice.open_before_fork, weak=False, dispatch_uid="jobs.guard.shutdown_notice.open"
    )
    signals.worker_process_init.connect(
        shutdown_notice.listen_in_pool_process,
        weak=False,
        dispatch_uid="jobs.guard.shutdown_notice.listen",
    )
    signals.worker_shutting_down.connect(
        shutdown_notice.announce_from_main_process,
        weak=False,
        dispatch_uid="jobs.guard.shutdown_notice.announce",
    )
    signals.task_unknown.connect(
        refuse_unknown_task, weak=False, dispatch_uid="jobs.guard.runner.refuse_unknown_task"
    )
    signals.worker_ready.connect(_on_worker_ready, weak=False, dispatch_uid="jobs.node.ready")
    signals.worker_shutting_down.connect(
        _on_shutting_down, weak=False, dispatch_uid="jobs.node.shutting_down"
    )
    signals.worker_shutdown.connect(_on_shutdown, weak=False, dispatch_uid="jobs.node.shutdown")
    signals.task_failure.connect(
        hard_limit.on_task_failure, weak=False, dispatch_uid="jobs.guard.hard_limit"
    )
    signals.worker_init.connect(
        revocation.install_revoke_command, weak=False, dispatch_uid="jobs.guard.revocation.command"
    )
    signals.task_revoked.connect(
        revocation.on_task_revoked, weak=False, dispatch_uid="jobs.guard.revocation.revoked"
    )


def _refuse_pool(**_kwargs: Any) -> None:
    connection_budget.refuse_pool("celery worker")


def _on_worker_ready(sender: Any = None, **_kwargs: Any) -> None:
    if any(supervisor.pid == os.getpid() for supervisor in _running):
        return  # one node per process, whatever Celery does on a reconnect
    consumer = sender
    app = consumer.app

    def queues() -> list[str]:
        # Read at every beat and tick: queues added or cancelled at run time count.
        return list(app.amqp.queues.consume_from)

    interval = get_conf().node_heartbeat
    info = NodeInfo(
        name=consumer.hostname,
        host=socket.gethostname(),
        pid=os.getpid(),
        queues=queues(),
        concurrency=int(getattr(consumer.controller, "concurrency", 1) or 1),
        version=f"celery {celery.__version__}",
        heartbeat_interval=interval,
    )
    heartbeat = NodeHeartbeat(info, queues)
    supervisor = Supervisor(
        node=info.name,
        pid=info.pid,
        queues=heartbeat.queues,
        heartbeat=interval,
        on_shutdown=heartbeat.stop,
    )
    sender = AlertSender(checks=ClusterWatch(every=get_ops_conf().beat_heartbeat_interval))
    heartbeat.start()
    supervisor.start()
    sender.start()
    _running.append(supervisor)
    _senders.append(sender)
    pid = os.getpid()
    # Cold shutdowns send no worker_shutdown; forked pool processes leave through os._exit.
    atexit.register(lambda: _wait_for_handoff() if os.getpid() == pid else None)


def _on_shutting_down(**_kwargs: Any) -> None:
    for supervisor in _running:
        supervisor.request_stop()


def _on_shutdown(**_kwargs: Any) -> None:
    while _senders:
        _senders.pop().stop()
    _wait_for_handoff()


def _wait_for_handoff() -> None:
    while _running:
        supervisor = _running.pop()
        supervisor.request_stop()
        if not supervisor.join(SHUTDOWN_GRACE + _JOIN_SLACK):
            log.error(
                "continuous jobs did not stop in time; their leases lapse within their ttl",
                extra={"action": "node_shutdown_timeout", "node": supervisor.node},
            )
