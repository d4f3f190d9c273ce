"""The nemesis' checker: plain functions over a history, independent of the code under test.

The history is what the jobs wrote themselves (``tests/support/jobs_nemesis.py``: a ``start``
and an ``end`` line per execution; ``tests/support/jobs_continuous.py``: a line per tick of the
continuous job), the rows of ``jobs_jobrun`` read back as plain values, and the faults the
nemesis injected. Each check returns the violations it found; none imports the ``jobs`` app.

Why the interval checks are sound: an execution writes ``start`` after its lease was acquired
and takes ``fence`` just before a fenced check that the database accepted (``committed``), so
its lease was valid from before ``start`` to after ``fence``. Two committed executions of one
lock key whose ``[start, fence]`` overlap therefore held two valid leases at once, and their
order by ``start`` is their order of acquisition, the order their tokens must grow in. An
execution whose check was refused (a paused holder, fenced out) may overlap anything: fencing,
not mutual exclusion, covers it, and ``success_without_fence`` checks the database agreed.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

PENDING = frozenset({"scheduled", "running"})
TERMINAL = frozenset({"succeeded", "failed", "skipped", "missed", "lost", "cancelled"})
SLOT_TRIGGERS = frozenset({"scheduled", "backfill"})
# Runs one per job and slot: a slot's, or the one a job gets per upstream slot.
PER_SLOT_TRIGGERS = SLOT_TRIGGERS | {"upstream"}


@dataclass(frozen=True)
class Execution:
    """One call of a nemesis job function, from its own lines. ``outcome`` is ``None`` when no
    ``end`` line was written (its process died or it is still running)."""

    job: str
    slot: datetime
    run: int
    token: int | None
    attempt: int
    key: str
    pid: int
    start: float
    fence: float | None = None
    end: float | None = None
    outcome: str | None = None

    @property
    def committed(self) -> bool:
        return self.outcome == "committed"


@dataclass(frozen=True)
class RunRow:
    """A row of ``jobs_jobrun`` as plain values (times as Unix seconds where compared)."""

    id: int
    job: str
    slot: datetime
    trigger: str
    status: str
    attempt: int = 1
    retry_of: int | None = None
    token: int | None = None


@dataclass(frozen=True)
class JobShape:
    """What the checker needs to know of a job: its interval (periodic), whether runs may
    overlap (policy ``allow``) and whether a lost run is retried."""

    name: str
    every: float | None = None
    overlap: str = "skip"
    on_lost: str = "abandon"


@dataclass(frozen=True)
class Fault:
    kind: str
    target: str
    start: float
    end: float

    def __str__(self) -> str:
        return f"{self.kind}({self.target}) {self.start:.3f}..{self.end:.3f}"


@dataclass(frozen=True)
class Tick:
    """A fenced write of the continuous job (accepted by the database)."""

    job: str
    token: int
    pid: int
    at: float


@dataclass(frozen=True)
class Violation:
    check: str
    message: str
    at: float | None = None  # Unix time near which it happened, to show the faults around it

    def __str__(self) -> str:
        return f"[{self.check}] {self.message}"


# --- parsing ----------------------------------------------------------------------------------


def parse_executions(lines: Iterable[str]) -> list[Execution]:
    """Executions from ``tests.nemesis.*`` lines, in the order they started. An ``end`` closes
    the latest open ``start`` of its run in its process; a torn last line (the process killed
    mid-write) is ignored."""
    records: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    open_starts: dict[tuple[int, int], list[int]] = defaultdict(list)
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        identity = (int(record["run"]), int(record["pid"]))
        if record["e"] == "start":
            open_starts[identity].append(len(records))
            records.append((record, None))
        elif open_starts[identity]:
            at = open_starts[identity].pop()
            records[at] = (records[at][0], record)
    return sorted((_execution(start, end) for start, end in records), key=lambda e: e.start)


def _execution(start: dict[str, Any], end: dict[str, Any] | None) -> Execution:
    return Execution(
        job=str(start["job"]),
        slot=datetime.fromisoformat(start["slot"]),
        run=int(start["run"]),
        token=None if start["token"] is None else int(start["token"]),
        attempt=int(start["attempt"]),
        key=str(start["key"]),
        pid=int(start["pid"]),
        start=float(start["t"]),
        fence=float(end["fence"]) if end else None,
        end=float(end["t"]) if end else None,
        outcome=str(end["outcome"]) if end else None,
    )


def parse_ticks(lines: Iterable[str]) -> list[Tick]:
    """The accepted fenced writes (``tick``, ``step``, ``final``) of a continuous-job log
    (``EVENT JOB TOKEN PID TIME``)."""
    ticks = []
    for line in lines:
        fields = line.split()
        if len(fields) == 5 and fields[0] in ("tick", "step", "final"):
            ticks.append(Tick(fields[1], int(fields[2]), int(fields[3]), float(fields[4])))
    return sorted(ticks, key=lambda t: t.at)


# --- the checks -------------------------------------------------------------------------------


def _family_roots(runs: Iterable[RunRow]) -> dict[int, int]:
    """Each run's first attempt (following ``retry_of``)."""
    parent = {run.id: run.retry_of for run in runs}
    roots = {}
    for run_id in parent:
        root, seen = run_id, set()
        while parent.get(root) is not None and root not in seen:
            seen.add(root)
            root = parent[root] or root
        roots[run_id] = root
    return roots


def duplicate_executions(
    executions: Sequence[Execution], runs: Sequence[RunRow], jobs: Mapping[str, JobShape]
) -> list[Violation]:
    """No run executed twice; no slot (or call) executed by two runs unless each earlier run is
    recorded ``lost``, was retried (a run names it in ``retry_of``) and its job retries."""
    problems: list[Violation] = []
    by_run: dict[int, list[Execution]] = defaultdict(list)
    for execution in executions:
        by_run[execution.run].append(execution)
    for run_id, repeated in by_run.items():
        if len(repeated) > 1:
            pids = ", ".join(f"pid {e.pid} at {e.start:.3f}" for e in repeated)
            problems.append(
                Violation(
                    "run-twice",
                    f"run {run_id} executed {len(repeated)} times: {pids}",
                    repeated[1].start,
                )
            )
    rows = {run.id: run for run in runs}
    roots = _family_roots(runs)
    retried = {run.retry_of for run in runs if run.retry_of is not None}
    slots: dict[tuple[str, object], list[Execution]] = defaultdict(list)
    for execution in executions:
        root = rows.get(roots.get(execution.run, execution.run))
        if root is None:
            slots[(execution.job, execution.slot)].append(execution)
        elif root.trigger in PER_SLOT_TRIGGERS:
            slots[(execution.job, root.slot)].append(execution)
        else:  # a call or a trigger: its retries are its own, whatever their time
            slots[(execution.job, f"run {root.id}")].append(execution)
    for (job, slot), group in slots.items():
        distinct = sorted({e.run: e for e in group}.values(), key=lambda e: e.start)
        if len(distinct) < 2:
            continue
        for earlier in distinct[:-1]:
            row = rows.get(earlier.run)
            status = row.status if row else "no record"
            if jobs[job].on_lost == "retry" and status == "lost" and earlier.run in retried:
                continue
            runs_text = ", ".join(f"run {e.run} (token {e.token})" for e in distinct)
            problems.append(
                Violation(
                    "slot-twice",
                    f"{job} {slot}: executed by {runs_text}; run {earlier.run} is {status}, "
                    f"not lost and retried (on_lost={jobs[job].on_lost})",
                    distinct[-1].start,
                )
            )
            break
    return problems


def _committed_by_key(
    executions: Sequence[Execution], jobs: Mapping[str, JobShape]
) -> dict[str, list[Execution]]:
    by_key: dict[str, list[Execution]] = defaultdict(list)
    for execution in executions:
        if execution.committed and jobs[execution.job].overlap != "allow":
            by_key[execution.key].append(execution)
    for group in by_key.values():
        group.sort(key=lambda e: e.start)
    return by_key


def overlapping_executions(
    executions: Sequence[Execution], jobs: Mapping[str, JobShape]
) -> list[Violation]:
    """No two committed executions of one lock key overlap (``[start, fence]``), for every job
    whose policy is not ``allow``."""
    problems = []
    for key, group in _committed_by_key(executions, jobs).items():
        latest: Execution | None = None
        for execution in group:
            if latest is not None and latest.fence is not None and execution.start < latest.fence:
                problems.append(
                    Violation(
                        "overlap",
                        f"{key}: run {execution.run} (token {execution.token}, pid "
                        f"{execution.pid}) started at {execution.start:.3f}, before run "
                        f"{latest.run} (token {latest.token}, pid {latest.pid}) passed its "
                        f"fenced check at {latest.fence:.3f}; both committed",
                        execution.start,
                    )
                )
            if latest is None or (execution.fence or 0) > (latest.fence or 0):
                latest = execution
    return problems


def token_order(executions: Sequence[Execution], jobs: Mapping[str, JobShape]) -> list[Violation]:
    """The tokens of one lock key's committed executions grow in the order they ran."""
    problems = []
    for key, group in _committed_by_key(executions, jobs).items():
        for before, after in itertools.pairwise(group):
            if before.token is None or after.token is None or after.token > before.token:
                continue
            problems.append(
                Violation(
                    "token-order",
                    f"{key}: run {after.run} (token {after.token}) ran after run {before.run} "
                    f"(token {before.token}) at {after.start:.3f}",
                    after.start,
                )
            )
    return problems


def success_without_fence(
    executions: Sequence[Execution], runs: Sequence[RunRow]
) -> list[Violation]:
    """A run recorded ``succeeded`` whose execution's fenced check was refused: the finish got
    through where the job's own write could not."""
    rows = {run.id: run for run in runs}
    problems = []
    for execution in executions:
        row = rows.get(execution.run)
        if row is not None and row.status == "succeeded" and execution.outcome == "rejected":
            problems.append(
                Violation(
                    "fencing",
                    f"run {execution.run} of {execution.job} (token {execution.token}) is "
                    f"recorded succeeded, yet its fenced check at {execution.fence:.3f} was "
                    f"refused",
                    execution.fence,
                )
            )
    return problems


def slot_grid(every: float, anchor: datetime, start: datetime, end: datetime) -> list[datetime]:
    """The slots of an interval anchored at ``anchor`` in ``[start, end]``."""
    step = timedelta(seconds=every)
    first = anchor + ((start - anchor) // step) * step
    if first < start:
        first += step
    return list(itertools.takewhile(lambda s: s <= end, (first + n * step for n in range(10**7))))


def calm_slots_complete(
    runs: Sequence[RunRow], jobs: Mapping[str, JobShape], start: datetime, end: datetime
) -> list[Violation]:
    """Every slot of every periodic job in ``[start, end]`` has exactly one slot run, in a
    terminal state."""
    problems = []
    by_slot: dict[tuple[str, datetime], list[RunRow]] = defaultdict(list)
    for run in runs:
        if run.trigger in SLOT_TRIGGERS:
            by_slot[(run.job, run.slot)].append(run)
    for shape in jobs.values():
        if shape.every is None:
            continue
        epoch = datetime.fromtimestamp(0, tz=start.tzinfo)
        for slot in slot_grid(shape.every, epoch, start, end):
            found = by_slot.get((shape.name, slot), [])
            statuses = [run.status for run in found]
            if len(found) == 1 and statuses[0] in TERMINAL:
                continue
            what = "no run" if not found else f"runs {[r.id for r in found]} {statuses}"
            problems.append(
                Violation(
                    "calm-slot",
                    f"{shape.name} slot {slot.isoformat()}: {what}, not one terminal run",
                    slot.timestamp(),
                )
            )
    return problems


def one_tenure(runs: Sequence[RunRow], jobs: Iterable[str]) -> list[Violation]:
    """Each continuous job in ``jobs`` has exactly one ``running`` tenure at the end."""
    problems = []
    for name in jobs:
        tenures = [r.id for r in runs if r.job == name and r.status == "running"]
        if len(tenures) != 1:
            problems.append(
                Violation("tenure", f"{name}: {len(tenures)} running tenures {tenures}, not one")
            )
    return problems


def nothing_pending(runs: Sequence[RunRow], before: datetime) -> list[Violation]:
    """No run of a slot or call before ``before`` (the check's time less the documented bound)
    is still ``scheduled`` or ``running``."""
    return [
        Violation(
            "pending",
            f"run {run.id} of {run.job} ({run.trigger}, {run.slot.isoformat()}) still {run.status}",
            run.slot.timestamp(),
        )
        for run in runs
        if run.status in PENDING and run.trigger != "continuous" and run.slot < before
    ]


def continuous_token_order(ticks: Sequence[Tick]) -> list[Violation]:
    """The continuous job's accepted writes never go back to a lower token."""
    problems = []
    highest: dict[str, Tick] = {}
    for tick in ticks:
        top = highest.get(tick.job)
        if top is not None and tick.token < top.token:
            problems.append(
                Violation(
                    "continuous-token",
                    f"{tick.job}: write with token {tick.token} (pid {tick.pid}) at "
                    f"{tick.at:.3f} after one with token {top.token} (pid {top.pid})",
                    tick.at,
                )
            )
        elif top is None or tick.token > top.token:
            highest[tick.job] = tick
    return problems


# The faults that leave a worker unable to act (a crash: it exited on its own, see harness).
WORKER_FAULTS = frozenset({"kill", "pause", "hang-db", "crash"})


def healthy_spans(
    faults: Sequence[Fault], workers: Sequence[str], start: float, end: float
) -> list[tuple[float, float]]:
    """The spans of ``[start, end]`` during which at least one of ``workers`` suffered no fault
    (killed and not yet started again, paused, or cut off from the database by a hang; a fault
    on one pool child counts against its whole worker)."""
    impaired: dict[str, list[tuple[float, float]]] = {worker: [] for worker in workers}
    for fault in faults:
        worker = fault.target.split("/")[0]
        if fault.kind in WORKER_FAULTS and worker in impaired and fault.end > fault.start:
            impaired[worker].append((fault.start, fault.end))
    moments = (t for spans in impaired.values() for span in spans for t in span)
    edges = sorted({start, end, *moments})
    healthy: list[tuple[float, float]] = []
    for a, b in itertools.pairwise(t for t in edges if start <= t <= end):
        middle = (a + b) / 2
        if any(not any(s <= middle <= e for s, e in spans) for spans in impaired.values()):
            if healthy and healthy[-1][1] == a:
                healthy[-1] = (healthy[-1][0], b)
            else:
                healthy.append((a, b))
    return healthy


def continuous_outages(
    ticks: Sequence[Tick], faults: Sequence[Fault], workers: Sequence[str],
    start: float, end: float, bound: float,
) -> tuple[list[Violation], float]:  # fmt: skip
    """While some worker is healthy, the continuous job never goes ``bound`` seconds without an
    accepted write: its holder's node dying, pausing or losing the database is followed by a
    takeover within the bound. Returns the violations and the longest such gap seen."""
    problems: list[Violation] = []
    longest = 0.0
    for a, b in healthy_spans(faults, workers, start, end):
        times = [a] + [tick.at for tick in ticks if a < tick.at < b] + [b]
        for before, after in itertools.pairwise(times):
            longest = max(longest, after - before)
            if after - before > bound:
                problems.append(
                    Violation(
                        "continuous-outage",
                        f"no accepted write from {before:.3f} to {after:.3f} ("
                        f"{after - before:.1f}s) while a worker was healthy, bound {bound:.0f}s",
                        before,
                    )
                )
    return problems, longest


# --- reporting --------------------------------------------------------------------------------


def report(
    violations: Sequence[Violation], faults: Sequence[Fault], seed: int, around: float = 30.0
) -> str:
    """Each violation with the faults within ``around`` seconds of it, and how to replay."""
    lines = [f"{len(violations)} violation(s); replay with NEMESIS_SEED={seed} make nemesis"]
    for violation in violations:
        lines.append(str(violation))
        if violation.at is None:
            continue
        near = [f for f in faults if f.start - around <= violation.at <= f.end + around]
        lines.extend(f"    near: {fault}" for fault in near)
    return "\n".join(lines)
