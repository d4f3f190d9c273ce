"""Continuous job functions the tests run (workers import this module through JOBS_MODULES).

Each appends to an independent, append-only log, one line per event, so ownership can be checked
without trusting the run table: ``EVENT JOB TOKEN PID TIME``. Fenced events (``tick``, ``step``,
``final``) are written inside ``ctx.fenced()``: a line means the database accepted the token at
that moment; ``rejected`` means it refused it.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from django.db import DatabaseError, connection

from jobs import job
from jobs.context import JobContext
from jobs.exceptions import LeaseLost
from tests.support.append_log import append_line


def _event(ctx: JobContext, log: str, event: str) -> None:
    append_line(log, f"{event} {ctx.job_name} {ctx.fencing_token} {os.getpid()} {time.time():.6f}")


def _fenced(ctx: JobContext, log: str, event: str) -> bool:
    """One fenced write; ``False`` once the database refused the token (the lease is gone).

    A database that cannot be reached refuses nothing: like a real poller, keep going (the next
    attempt reconnects) until the keeper's local deadline sets ``ctx.stopping``."""
    try:
        with ctx.fenced():
            _event(ctx, log, event)
    except LeaseLost:
        _event(ctx, log, "rejected")
        return False
    except DatabaseError:
        _event(ctx, log, "unreachable")
        connection.close()
    return True


@job("tests.continuous.loop")
def loop(ctx: JobContext, log: str, tick: float = 0.1, linger: float = 0.0) -> str:
    """The long form: works in a loop until asked to stop, then takes ``linger`` seconds to
    finish its work and commits a last write."""
    _event(ctx, log, "start")
    try:
        while not ctx.stopping.wait(tick):
            if not _fenced(ctx, log, "tick"):
                return "lease lost"
        time.sleep(linger)
        return "stopped" if _fenced(ctx, log, "final") else "lease lost"
    finally:
        _event(ctx, log, "end")


@job("tests.continuous.step", step_every="100ms")
def step(ctx: JobContext, log: str) -> None:
    """The step form: one fenced write per call."""
    _fenced(ctx, log, "step")


@job("tests.continuous.crash")
def crash(ctx: JobContext, log: str) -> None:
    """Fails at once, every time."""
    _event(ctx, log, "start")
    raise RuntimeError("boom from a continuous job")


# --- reading the log back (test side) ---------------------------------------------------------

FENCED = frozenset({"tick", "step", "final"})


@dataclass(frozen=True)
class Event:
    kind: str
    job: str
    token: int
    pid: int
    at: float


def read_events(path: str | Path) -> list[Event]:
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []
    events = []
    for line in lines:
        kind, job_name, token, pid, at = line.split()
        events.append(Event(kind, job_name, int(token), int(pid), float(at)))
    return sorted(events, key=lambda e: e.at)


def fenced_token_regressions(events: list[Event]) -> list[str]:
    """Fenced writes of a job with a lower token after one with a higher token: two holders
    writing at once. Must be empty."""
    highest: dict[str, Event] = {}
    problems = []
    for event in events:
        if event.kind not in FENCED:
            continue
        top = highest.get(event.job)
        if top is not None and event.token < top.token:
            problems.append(f"{event} after {top}")
        elif top is None or event.token > top.token:
            highest[event.job] = event
    return problems


def open_tenures(events: list[Event], gone: Collection[int] = ()) -> dict[str, list[Event]]:
    """Per job, the long-form tenures started and not ended, except in processes ``gone``
    (killed or paused): what is executing now. More than one for a job is a double holder."""
    started: dict[tuple[str, int], Event] = {}
    for event in events:
        if event.kind == "start":
            started[(event.job, event.token)] = event
        elif event.kind == "end":
            started.pop((event.job, event.token), None)
    running: dict[str, list[Event]] = {}
    for event in started.values():
        if event.pid not in gone:
            running.setdefault(event.job, []).append(event)
    return running


def overlapping_tenures(
    events: list[Event], ended_at: dict[int, float], paused: Collection[tuple[str, int]] = ()
) -> list[str]:
    """Long-form tenures of one job whose [start, end] intervals overlap; a tenure with no end
    ends at ``ended_at[pid]`` (when its process was killed) or is still running. Tenures
    ``paused`` (job, token) are left out: a paused process outlives its lease by design, and
    fencing, not this check, covers what it does when it wakes. Must be empty."""
    spans: dict[str, list[tuple[float, float, Event]]] = {}
    opened: dict[tuple[str, int], Event] = {}
    for event in (e for e in events if (e.job, e.token) not in paused):
        if event.kind == "start":
            opened[(event.job, event.token)] = event
        elif event.kind == "end" and (event.job, event.token) in opened:
            start = opened.pop((event.job, event.token))
            spans.setdefault(event.job, []).append((start.at, event.at, start))
    for start in opened.values():
        end = ended_at.get(start.pid, float("inf"))
        spans.setdefault(start.job, []).append((start.at, end, start))
    problems = []
    for job_spans in spans.values():
        job_spans.sort(key=lambda span: span[0])
        for (_, end, first), (begin, _, second) in itertools.pairwise(job_spans):
            if begin < end:
                problems.append(f"{second} began before {first} ended ({end:.3f})")
    return problems


Holders = dict[str, tuple[str, int]]  # lease key -> (node, token), live leases only


class Sampler:
    """Every ``period`` seconds, reads who holds each live lease and which tenures the log shows
    executing; records every moment at which two tenures of one job execute at once.

    Processes whose pid is in ``gone`` (killed, or paused) are not executing anything.
    """

    def __init__(self, log: Path, read_holders: Callable[[], Holders], period: float = 0.1) -> None:
        self.log = log
        self.read_holders = read_holders
        self.period = period
        self.samples: list[tuple[float, Holders]] = []
        self.violations: list[str] = []
        self._gone: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def gone(self, pid: int, is_gone: bool = True) -> None:
        with self._lock:
            (self._gone.add if is_gone else self._gone.discard)(pid)

    def latest(self) -> Holders:
        with self._lock:
            return dict(self.samples[-1][1]) if self.samples else {}

    def per_node(self) -> Counter[str]:
        return Counter(node for node, _ in self.latest().values())

    def first_held_by_other(self, key: str, since: float, other_than: str) -> float | None:
        """When ``key`` was first sampled held by a node other than ``other_than`` after
        ``since`` (wall clock)."""
        with self._lock:
            samples = list(self.samples)
        for at, holders in samples:
            if at > since and key in holders and holders[key][0] != other_than:
                return at
        return None

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.period):
                self._sample()
        finally:
            connection.close()

    def _sample(self) -> None:
        try:
            holders: Holders | None = self.read_holders()
        except Exception:  # the database is down: the log is still there to check
            holders = None
        with self._lock:
            gone = set(self._gone)
        now = time.time()
        for job_name, running in open_tenures(read_events(self.log), gone).items():
            if len(running) > 1:
                self.violations.append(f"{now:.3f}: {job_name} executing twice: {running}")
        if holders is not None:
            with self._lock:
                self.samples.append((now, holders))
