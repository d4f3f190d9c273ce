"""A forked process (a Celery pool process) never renews its parent's leases
(jobs.guard.lease_keeper): the parent's keepers are its own to renew and to stop.

Found by the nemesis: a pool process forked while the worker's main process held a continuous
job kept renewing that job's lease after the tenure had ended (its main process paused past
the ttl, the lease declared lost there), so for minutes no node could take the job over.
Renewals are recorded per process here instead of sent to a database."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobs.guard import lease_keeper
from jobs.guard.lease import HeldLease
from jobs.guard.lease_keeper import LeaseKeeper

TTL = 0.3  # a renewal every 0.1 s


def _held(token: int) -> HeldLease:
    return HeldLease(
        key=f"job:k{token}", holder=f"n:{os.getpid()}:continuous", token=token, ttl=TTL,
        expires_at=datetime.now(UTC), local_deadline=time.monotonic() + 3600,
    )  # fmt: skip


@pytest.fixture
def renewals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each renewal appends ``pid token`` to a file, from whichever process makes it."""
    log = tmp_path / "renewals"
    log.touch()

    def renew(held: HeldLease, using: str) -> HeldLease:
        with log.open("a") as out:
            out.write(f"{os.getpid()} {held.token}\n")
        return held

    monkeypatch.setattr(lease_keeper, "_renew_on_kept_connection", renew)
    return log


def _renewals(log: Path) -> list[tuple[int, int]]:
    return [(int(p), int(t)) for p, t in (line.split() for line in log.read_text().splitlines())]


def _renewed(log: Path) -> set[tuple[int, int]]:
    return set(_renewals(log))


def _wait(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_forked_child_renews_its_own_keepers_and_never_its_parents(renewals: Path) -> None:
    parents = LeaseKeeper(_held(1), threading.Event())
    parents.start()
    try:
        assert _wait(lambda: (os.getpid(), 1) in _renewed(renewals)), "the parent renews"
        child = os.fork()
        if child == 0:  # the child: a run of its own, as a pool process has, for a while
            code = 1
            try:
                own = LeaseKeeper(_held(2), threading.Event())
                own.start()
                # Three renewals of its own: a heartbeat that kept the parent's keeper (due as
                # often) would have renewed that one too by then.
                if _wait(lambda: _renewals(renewals).count((os.getpid(), 2)) >= 3):
                    code = 0
                own.stop()
            finally:
                os._exit(code)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "the child's own keeper was not renewed"
        assert (child, 2) in _renewed(renewals)
        assert (child, 1) not in _renewed(renewals), "the child renewed its parent's lease"
    finally:
        parents.stop()
