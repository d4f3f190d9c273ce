"""The supervisor of continuous jobs on one node: a thread in the worker's main process.

More in docs/architecture.md, "Module notes".
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, connection

from jobs import registry
from jobs.context import JobContext
from jobs.continuous import tenures
from jobs.continuous.nodes import LIVE_NODE_PG, MISSED_HEARTBEATS
from jobs.continuous.placement import plan
from jobs.exceptions import BadLockKey, UnknownJobFunction
from jobs.guard import lease, reconnect
from jobs.guard.lease import HeldLease
from jobs.guard.lease_keeper import LeaseKeeper
from jobs.guard.runner import lock_key_for
from jobs.models import Job, RunStatus

log = logging.getLogger(__name__)

# How often each node looks at the cluster: bounds graceful handoff and rebalancing delays.
SUPERVISION_PERIOD = 1.0
# How long a free job may wait for its planned node before any node that can run it takes it.
FALLBACK_AFTER = 2.0
# How long a shutting-down node waits for its continuous functions to return.
SHUTDOWN_GRACE = 10.0
# How often a node records lost the tenures whose lease lapsed without a takeover.
SWEEP_EVERY = 30.0
# Wake this long after a lease lapses or a node dies, so the database agrees it has.
WAKE_MARGIN = 0.02
# Between the ticks that read the whole snapshot, a tick reads only the cluster version
# (jobs/sql/cluster_version.sql), unless a deadline the last snapshot announced came; but the
# whole snapshot at least this often, as a backstop for a change no version bump announces (rows
# written around the app).
FULL_LOOK_AT_LEAST_EVERY = 10.0

_VERSION = "SELECT version FROM jobs_cluster_version WHERE id = 1"

# The whole snapshot, one statement. Leases are matched on each job's default key
# (Job.lock_key, "job:" + name) plus the keys of jobs whose function derives its own lock key
# (passed in). The cluster version is read in the same statement, so it is the snapshot's.
_SNAPSHOT = f"""
SELECT
  COALESCE((SELECT json_agg(json_build_array(j.id, j.name, j.task, j.queue, j.lease_ttl,
                                             j.args, j.kwargs) ORDER BY j.name)
              FROM jobs_job AS j WHERE j.kind = 'continuous' AND j.enabled), '[]'::json),
  COALESCE((SELECT json_agg(json_build_array(l.key, l.holder,
                                             extract(epoch FROM l.expires_at - now())))
              FROM jobs_lease AS l
             WHERE {lease.lease_live_pg("l")}
               AND (l.key = ANY(%(keys)s::text[])
                    OR l.key IN (SELECT 'job:' || j.name FROM jobs_job AS j
                                  WHERE j.kind = 'continuous' AND j.enabled))), '[]'::json),
  COALESCE((SELECT json_agg(json_build_array(n.name, n.queues,
                extract(epoch FROM n.last_heartbeat
                        + make_interval(secs => {MISSED_HEARTBEATS} * n.heartbeat_interval)
                        - now())))
              FROM jobs_node AS n WHERE {LIVE_NODE_PG}), '[]'::json),
  ({_VERSION})
"""


@dataclass(frozen=True)
class ContinuousJob:
    id: int
    name: str
    task: str
    queue: str
    lease_ttl: int
    args: list[Any]
    kwargs: dict[str, Any]

    @property
    def fingerprint(self) -> str:
        """What, if edited, makes a running tenure restart with the new definition."""
        return json.dumps([self.task, self.queue, self.lease_ttl, self.args, self.kwargs])


@dataclass(frozen=True)
class Snapshot:
    jobs: list[ContinuousJob]
    # Live leases: key -> (holder, seconds until it lapses).
    leases: dict[str, tuple[str, float]]
    # Live nodes: name -> (queues, seconds until it counts as dead).
    nodes: dict[str, tuple[frozenset[str], float]]
    # Monotonic time the snapshot was read.
    read_at: float
    # The cluster version it shows (None if the version row is missing: always look again).
    version: int | None = None


def effective_ttl(lease_ttl: float, heartbeat: float) -> float:
    """A continuous job's lease lasts 3 node heartbeats, or its own ``lease_ttl`` if shorter:
    it lapses when its node would count as dead, not later."""
    return min(float(lease_ttl), MISSED_HEARTBEATS * heartbeat)


def node_of(holder: str) -> str:
    """The node of a lease holder named ``node:pid:what`` (runs and tenures are named so)."""
    parts = holder.rsplit(":", 2)
    return parts[0] if len(parts) == 3 else holder


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def read_snapshot(extra_keys: Sequence[str] = ()) -> Snapshot:
    with connection.cursor() as cursor:
        cursor.execute(_SNAPSHOT, {"keys": list(extra_keys)})
        row = cursor.fetchone()
    read_at = time.monotonic()
    assert row is not None
    jobs = [
        ContinuousJob(
            id=int(j[0]),
            name=j[1],
            task=j[2],
            queue=j[3],
            lease_ttl=int(j[4]),
            args=list(_json(j[5]) or []),
            kwargs=dict(_json(j[6]) or {}),
        )
        for j in _json(row[0])
    ]
    leases = {key: (holder, float(expires_in)) for key, holder, expires_in in _json(row[1])}
    nodes = {
        name: (frozenset(_json(queues) or ()), float(dead_in))
        for name, queues, dead_in in _json(row[2])
    }
    version = None if row[3] is None else int(row[3])
    return Snapshot(jobs=jobs, leases=leases, nodes=nodes, read_at=read_at, version=version)


def read_version() -> int | None:
    """The cluster version: changed by every write a snapshot would show
    (jobs/sql/cluster_version.sql)."""
    with connection.cursor() as cursor:
        cursor.execute(_VERSION)
        row = cursor.fetchone()
    return None if row is None or row[0] is None else int(row[0])


@dataclass(frozen=True)
class _Outcome:
    raised: bool = False
    error: str = ""
    traceback: str = ""
    value: Any = None


class Tenure:
    """One continuous job held by this node: its lease, keeper, run record and function thread."""

    def __init__(
        self,
        job: ContinuousJob,
        spec: registry.JobSpec,
        held: HeldLease,
        begun: tenures.Begun,
        on_end: Callable[[Tenure], None],
    ) -> None:
        self.job = job
        self.spec = spec
        self.key = held.key
        self.token = held.token
        self.run_id = begun.run_id
        self.ctx = JobContext(
            job_name=job.name,
            run_id=begun.run_id,
            scheduled_for=begun.started_at,
            fencing_token=held.token,
            attempt=1,
            lease_key=held.key,
        )
        self.keeper = LeaseKeeper(held, self.ctx.stopping)
        self._on_end = on_end
        # Guards the stop request against the function ending at the same moment.
        self._lock = threading.Lock()
        self._ended = False
        self._stopped_for: RunStatus | None = None
        self._why = ""
        self.released = False
        self._thread = threading.Thread(
            target=self._run, name=f"continuous:{job.name}", daemon=True
        )

    @property
    def stopping(self) -> bool:
        return self._stopped_for is not None

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self.keeper.start()
        self._thread.start()

    def stop(self, status: RunStatus, why: str) -> None:
        """Ask the function to return (``ctx.stopping``); the tenure ends as ``status``."""
        with self._lock:
            if self._stopped_for is not None or self._ended:
                return
            self._stopped_for = status
            self._why = why
            self.ctx.stopping.set()
        log.info(
            "stopping %s (token %d): %s",
            self.job.name,
            self.token,
            why,
            extra={**self._fields(), "action": "tenure_stopping", "reason": why},
        )

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _fields(self) -> dict[str, Any]:
        return {"job": self.job.name, "run_id": self.run_id, "token": self.token, "key": self.key}

    def _run(self) -> None:
        try:
            self._finish(self._call())
        except Exception:
            log.exception("recording the end of %s failed", self.job.name, extra=self._fields())
        finally:
            connection.close()  # the function's and the finish's connection (this thread's)
            self._on_end(self)

    def _call(self) -> _Outcome:
        ctx, spec, job = self.ctx, self.spec, self.job
        try:
            if spec.step_every is None:
                return _Outcome(value=spec.call(ctx, job.args, job.kwargs))
            value = None
            while not ctx.stopping.is_set():
                value = spec.call(ctx, job.args, job.kwargs)
                if ctx.stopping.wait(spec.step_every):
                    break
            return _Outcome(value=value)
        except Exception as exc:
            return _Outcome(
                raised=True, error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc()
            )

    def _finish(self, outcome: _Outcome) -> None:
        with self._lock:
            self._ended = True
            asked = self.ctx.stopping.is_set()
            stopped_for, why = self._stopped_for, self._why
        self.keeper.stop()
        lost = self.keeper.lost
        status = tenures.status_for(stopped_for, lease_lost=lost, raised=outcome.raised)
        if lost:
            why = "the lease was lost (not renewed in time, or taken over)"
        elif outcome.raised:
            why = "the function raised"
        elif not why:
            why = (
                "asked to stop by another run (overlap replace)"
                if asked
                else "the function returned without being asked to stop"
            )
        error = outcome.error or (why if status in (RunStatus.LOST, RunStatus.CANCELLED) else "")
        result = json.dumps({"ended": why, "value": outcome.value}, default=repr)
        fields = self._fields()
        try:
            recorded = tenures.finish(
                self.run_id,
                key=self.key,
                token=self.token,
                status=status,
                error=error,
                traceback=outcome.traceback,
                result=result,
            )
        except DatabaseError as exc:
            recorded = None
            log.warning("could not record the end of %s: %s", self.job.name, exc, extra=fields)
        # Handing the lease back is what makes a handoff immediate. A function that ended
        # without being asked keeps it until it lapses: a crash loop restarts once per ttl.
        if asked and not lost:
            try:
                self.released = lease.release(self.keeper.current)
            except DatabaseError as exc:
                log.warning(
                    "could not release %s, it lapses within its ttl: %s",
                    self.key,
                    exc,
                    extra=fields,
                )
        log.log(
            logging.WARNING if status in (RunStatus.FAILED, RunStatus.LOST) else logging.INFO,
            "tenure of %s (token %d) ended %s: %s%s",
            self.job.name,
            self.token,
            recorded or f"{status} (not recorded)",
            why,
            "; lease released" if self.released else "",
            extra={**fields, "action": "tenure_ended", "status": recorded or status.value},
        )


class Supervisor:
    """Runs this node's share of the continuous jobs; see the module docstring."""

    def __init__(
        self,
        *,
        node: str,
        pid: int,
        queues: Callable[[], Sequence[str]],
        heartbeat: float,
        period: float = SUPERVISION_PERIOD,
        fallback_after: float = FALLBACK_AFTER,
        shutdown_grace: float = SHUTDOWN_GRACE,
        on_shutdown: Callable[[], None] | None = None,
    ) -> None:
        self.node = node
        self.pid = pid
        self.holder = f"{node}:{pid}:continuous"
        self._queues = queues
        self.heartbeat = heartbeat
        self.period = period
        self.fallback_after = fallback_after
        self.shutdown_grace = shutdown_grace
        self._on_shutdown = on_shutdown
        self._tenures: dict[str, Tenure] = {}
        self._lock = threading.Lock()
        self._free_since: dict[str, float] = {}
        self._extra_keys: set[str] = set()
        self._warned: set[str] = set()
        # Keys whose start a broken connection cut: the lease may be this node's with no tenure.
        self._cut_starts: set[str] = set()
        self._next_sweep = time.monotonic() + SWEEP_EVERY
        # What the last full look saw, and until when nothing it knows of falls due.
        self._seen_version: int | None = None
        self._seen_queues: frozenset[str] = frozenset()
        self._quiet_until = 0.0
        self._changed_here = False  # a tenure ended: look at the whole cluster again
        self.full_looks = 0  # whole snapshots read (tests, benchmarks)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="continuous-supervisor", daemon=True)

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def request_stop(self) -> None:
        """Begin the graceful shutdown. Only sets events: safe from a signal handler."""
        self._stop.set()
        self._wake.set()

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def held(self) -> dict[str, int]:
        """Keys this node holds a tenure of, with their tokens."""
        with self._lock:
            return {key: t.token for key, t in self._tenures.items()}

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._wake.clear()
                delay = self._safe_tick()
                self._wake.wait(delay)
            self.shutdown()
        finally:
            connection.close()

    def _safe_tick(self) -> float:
        try:
            return self.tick()
        except Exception as exc:
            # A database restart or any other failure must not end supervision.
            log.warning(
                "continuous supervision failed, retrying: %s",
                exc,
                exc_info=not isinstance(exc, DatabaseError),
                extra={"action": "supervisor_error", "node": self.node},
            )
            connection.close()
            return self.period

    def shutdown(self) -> None:
        """Mark the node stopped, stop every tenure, wait (bounded) for them to hand back."""
        if self._on_shutdown is not None:
            try:
                self._on_shutdown()
            except Exception:
                log.exception("node shutdown hook failed", extra={"node": self.node})
        with self._lock:
            running = list(self._tenures.values())
        for tenure in running:
            tenure.stop(RunStatus.SUCCEEDED, "its node is shutting down")
        deadline = time.monotonic() + self.shutdown_grace
        for tenure in running:
            if not tenure.join(max(0.0, deadline - time.monotonic())):
                log.error(
                    "%s did not return within %ss of the shutdown; its lease lapses within %ss",
                    tenure.job.name,
                    self.shutdown_grace,
                    tenure.keeper.current.ttl,
                    extra={"action": "tenure_abandoned", "job": tenure.job.name},
                )

    # --- one tick -----------------------------------------------------------------------------

    def tick(self) -> float:
        """Look at the cluster once and act; returns the seconds until the next look.

        The whole snapshot is read only when something may have changed: the cluster version
        moved (a job edited, a continuous lease taken or given back, a node joined or left),
        a tenure of this node ended, this node's queues changed, a lapse, a death or a fallback
        the last snapshot announced fell due, or ``FULL_LOOK_AT_LEAST_EVERY`` passed. Otherwise
        a tick is one read of the version row."""
        my_queues = frozenset(self._queues())
        started = time.monotonic()
        if (
            started < self._quiet_until
            and not self._changed_here
            and my_queues == self._seen_queues
            and self._seen_version is not None
            and read_version() == self._seen_version
        ):
            return max(WAKE_MARGIN, min(self.period, self._quiet_until - started))
        self._changed_here = False
        snap = read_snapshot(sorted(self._extra_keys))
        self.full_looks += 1
        now = snap.read_at
        jobs = self._keyed(snap.jobs)

        nodes = {name: queues for name, (queues, _) in snap.nodes.items()}
        nodes[self.node] = my_queues  # this node is alive, whatever its heartbeat row says
        holders = {key: node_of(holder) for key, (holder, _) in snap.leases.items()}
        desired = plan({key: job.queue for key, (job, _) in jobs.items()}, nodes, holders)

        with self._lock:
            tenures_now = dict(self._tenures)
        for key, tenure in tenures_now.items():
            if not tenure.stopping:
                self._stop_if_unwanted(key, tenure, jobs, my_queues, desired)

        # Until the next deadline this snapshot announces (uncapped: quiet ticks wait for it).
        wake_in = FULL_LOOK_AT_LEAST_EVERY
        for key, (job, spec) in jobs.items():
            if key in tenures_now or spec is None or job.queue not in my_queues:
                continue
            if key in snap.leases and key in self._cut_starts:
                self._cut_starts.discard(key)
                if snap.leases[key][0] == self.holder and self._release_cut_start(key):
                    self._changed_here = True  # free now: started at the next look
                    continue
            if key in snap.leases:
                self._free_since.pop(key, None)
                expires_in = snap.leases[key][1]
                wake_in = min(wake_in, expires_in + WAKE_MARGIN)
                continue
            free_since = self._free_since.setdefault(key, now)
            if desired.get(key) != self.node:
                fallback_in = free_since + self.fallback_after - now
                if fallback_in > 0:
                    wake_in = min(wake_in, fallback_in)
                    continue
            self._start(key, job, spec)
        for key in list(self._free_since):
            if key not in jobs:
                del self._free_since[key]

        for name, (_, dead_in) in snap.nodes.items():
            if name != self.node:
                wake_in = min(wake_in, dead_in + WAKE_MARGIN)
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_EVERY
            self._sweep()
        wake_in = min(wake_in, max(0.0, self._next_sweep - now))
        self._seen_version, self._seen_queues = snap.version, my_queues
        self._quiet_until = now + wake_in
        return max(WAKE_MARGIN, min(self.period, wake_in) - (time.monotonic() - now))

    def _keyed(
        self, jobs: list[ContinuousJob]
    ) -> dict[str, tuple[ContinuousJob, registry.JobSpec | None]]:
        """Each job by its lease key, with its function (``None`` if not registered here)."""
        keyed: dict[str, tuple[ContinuousJob, registry.JobSpec | None]] = {}
        for job in jobs:
            try:
                spec: registry.JobSpec | None = registry.get(job.task)
            except UnknownJobFunction:
                spec = None
                self._warn_once(
                    job.name,
                    f"continuous job {job.name}: "
                    f"function {job.task} is not registered on this node",
                    "unknown_function",
                )
            key = Job(name=job.name).lock_key
            if spec is not None and spec.lock_key is not None:
                try:
                    key = lock_key_for(Job(name=job.name, args=job.args, kwargs=job.kwargs), spec)
                except BadLockKey as exc:
                    # A row written around validation: that job alone is left unsupervised.
                    self._warn_once(
                        job.name, f"continuous job {job.name}: lock key {exc}", "bad_lock_key"
                    )
                    continue
                if key not in self._extra_keys:
                    # Its lease was not in this snapshot: look again next tick, act then.
                    self._extra_keys.add(key)
                    continue
            keyed[key] = (job, spec)
        return keyed

    def _warn_once(self, job_name: str, message: str, action: str) -> None:
        if job_name not in self._warned:
            self._warned.add(job_name)
            log.warning(message, extra={"action": action, "job": job_name})

    def _stop_if_unwanted(
        self,
        key: str,
        tenure: Tenure,
        jobs: dict[str, tuple[ContinuousJob, registry.JobSpec | None]],
        my_queues: frozenset[str],
        desired: dict[str, str],
    ) -> None:
        current = jobs.get(key)
        if current is None:
            tenure.stop(RunStatus.CANCELLED, "the job was paused, removed or made periodic")
        elif current[0].fingerprint != tenure.job.fingerprint:
            tenure.stop(RunStatus.SUCCEEDED, "the job was edited; restarting with the change")
        elif current[0].queue not in my_queues:
            tenure.stop(RunStatus.SUCCEEDED, "this node no longer consumes the job's queue")
        elif desired.get(key) != self.node:
            tenure.stop(RunStatus.SUCCEEDED, f"handed over to {desired.get(key)} for balance")

    def _start(self, key: str, job: ContinuousJob, spec: registry.JobSpec) -> None:
        ttl = effective_ttl(job.lease_ttl, self.heartbeat)
        try:
            held = lease.acquire(key, self.holder, ttl)
            if held is None:
                return
            self._free_since.pop(key, None)
            begun = self._begin(job, key, held)
        except reconnect.CONNECTION_ERRORS:
            self._cut_starts.add(key)  # it may have committed: see _release_cut_start
            raise
        self._cut_starts.discard(key)
        tenure = Tenure(job, spec, held, begun, self._ended)
        with self._lock:
            self._tenures[key] = tenure
        tenure.start()
        log.info(
            "started %s here (token %d, lease ttl %ss)%s",
            job.name,
            held.token,
            f"{ttl:g}",
            f"; {begun.orphans_closed} earlier tenure(s) recorded lost"
            if begun.orphans_closed
            else "",
            extra={
                "action": "tenure_started",
                "job": job.name,
                "token": held.token,
                "run_id": begun.run_id,
                "node": self.node,
            },
        )

    def _begin(self, job: ContinuousJob, key: str, held: HeldLease) -> tenures.Begun:
        """The tenure's record, or the lease given back (else it lapses within its ttl)."""
        try:
            return tenures.begin(
                job_id=job.id, key=key, token=held.token, node=self.node, pid=self.pid
            )
        except BaseException:
            with contextlib.suppress(DatabaseError):
                lease.release(held)
            raise

    def _release_cut_start(self, key: str) -> bool:
        """Give back the lease on ``key`` that this node's start took though a broken
        connection made it look failed (no tenure runs under it): the job would otherwise wait
        a whole ttl for it to lapse. Only that holder's token is released."""
        current = lease.current_holder(key)
        if current is None or current.holder != self.holder:
            return False
        released = lease.force_release(key, token=current.token)
        if released:
            log.warning(
                "gave back the lease on %s that a start cut by a broken connection took",
                key,
                extra={"action": "cut_start_released", "key": key, "token": current.token},
            )
        return released

    def _ended(self, tenure: Tenure) -> None:
        with self._lock:
            if self._tenures.get(tenure.key) is tenure:
                del self._tenures[tenure.key]
        self._changed_here = True
        self._wake.set()

    def _sweep(self) -> None:
        for orphan in tenures.close_orphans():
            log.warning(
                "tenure %d of job %d on %s recorded lost: its lease lapsed",
                orphan.run_id,
                orphan.job_id,
                orphan.node,
                extra={"action": "tenure_lost", "run_id": orphan.run_id, "node": orphan.node},
            )
