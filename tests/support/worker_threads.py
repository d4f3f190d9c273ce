"""Running a run as a worker would, on a thread of the test process (its own connection)."""

from __future__ import annotations

import threading
import time

from django.db import connection

from jobs.guard import lease
from jobs.guard.lease import HeldLease
from jobs.guard.runner import execute_run
from jobs.models import JobRun


def on_a_worker_thread(run_id: int) -> threading.Thread:
    """Start ``execute_run(run_id)`` on a thread of its own, closing its connection after."""

    def work() -> None:
        try:
            execute_run(run_id, task_id="t", node="n")
        finally:
            connection.close()

    thread = threading.Thread(target=work)
    thread.start()
    return thread


def wait_for_token(run_id: int, timeout: float = 10) -> None:
    """Until the run has taken its lease (its fencing token is recorded)."""
    deadline = time.monotonic() + timeout
    while not JobRun.objects.filter(pk=run_id, fencing_token__isnull=False).exists():
        assert time.monotonic() < deadline, "the run never took its lease"
        time.sleep(0.05)


def worker_holding_its_lease(run_id: int) -> threading.Thread:
    """``on_a_worker_thread(run_id)``, once the run has taken its lease."""
    worker = on_a_worker_thread(run_id)
    wait_for_token(run_id)
    return worker


def lease_taken_mid_run(run_id: int, lock_key: str) -> HeldLease:
    """Run ``run_id`` on a worker thread; once it holds its lease, release it (as an operator
    would) and let another holder take it; wait for the worker to end. The new holder's lease."""
    worker = worker_holding_its_lease(run_id)
    assert lease.force_release(lock_key)
    newer = lease.acquire(lock_key, "usurper", 30)
    assert newer is not None
    worker.join(timeout=10)
    assert not worker.is_alive()
    return newer
