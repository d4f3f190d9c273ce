"""The nemesis: a cluster of real beats and workers running jobs of every policy, faults from a
seeded schedule (``tests/nemesis/schedule.py``), then a calm period, then the checker
(``tests/nemesis/checker.py``) over what the jobs wrote and the run table.

The cluster: ``BEATS`` beats and two workers (``worker-2`` reaches the database through a proxy
that can hang), a Redis of the run's own (so it can be flushed and restarted) and the tests'
PostgreSQL. Every process killed is started again after the fault (a new log file per
incarnation: ``worker-1.2.log``); every process paused is continued.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
import redis
from django.conf import settings
from django.db import connection

from devtools.services import free_port, start_redis
from jobs.audit import Actor
from jobs.models import JobRun
from jobs.schedule.kinds import Every, Triggered
from jobs.services import JobDefinition, create_job
from tests.acceptance.conftest import Cluster, live_database_url, wait_for
from tests.nemesis import checker
from tests.nemesis.checker import Fault, JobShape, RunRow, Violation
from tests.nemesis.schedule import Planned, draw
from tests.support.connection_cutter import ConnectionCutter

log = logging.getLogger(__name__)

# Two beats in the suite's runs; long runs may ask for more (``make nemesis BEATS=3``).
BEATS = tuple(f"beat-{n}" for n in range(1, int(os.environ.get("NEMESIS_BEATS") or 2) + 1))
WORKERS = ("worker-1", "worker-2")
PROXIED = "worker-2"
CONCURRENCY = 4
HEARTBEAT = 2.0  # continuous leases last 3 heartbeats (6 s); the supervisor looks every 2 s
PROCESS_ENV = {
    "JOBS_MODULES": "tests.support.jobs_nemesis,tests.support.jobs_continuous",
    "JOBS_MAINTENANCE_INTERVAL": "0.5",
    "JOBS_REPUBLISH_AFTER": "2",
    "JOBS_NODE_HEARTBEAT": str(HEARTBEAT),
}
START_TIMEOUT = 120  # several Python processes starting at once on a small, shared machine
CALM = 45.0  # seconds without faults before the check
# The documented bounds the check allows, with room for restarts on a loaded machine:
# a continuous job runs again within lease_ttl + a supervisor period after its node died
# (8 s here), plus a worker's start-up when the healthy worker was just started again.
CONTINUOUS_BOUND = 40.0
SETTLE = 60.0  # after the calm, how long the slots of the calm may take to end
START_DEADLINE = 20  # seconds; a run not started by then is recorded missed

# name: (task, schedule seconds or None, seconds of work, policies, upstreams)
JOBS: dict[str, tuple[str, float | None, float, dict[str, Any], tuple[str, ...]]] = {
    "quick": ("tests.nemesis.work", 2, 0.3, {"lease_ttl": 5}, ()),
    "slow-skip": ("tests.nemesis.work", 3, 4.0, {"lease_ttl": 5}, ()),
    "waiter": ("tests.nemesis.work", 5, 1.5, {"overlap": "wait", "lease_ttl": 5}, ()),
    "retrier": ("tests.nemesis.work", 4, 2.0,
                {"overlap": "wait", "on_lost": "retry", "lease_ttl": 5}, ()),
    "capped": ("tests.nemesis.work", 2, 3.0,
               {"overlap": "wait", "max_concurrency": 2, "lease_ttl": 5}, ()),
    "chained": ("tests.nemesis.work", None, 0.5, {"lease_ttl": 5}, ("waiter",)),
    "caller": ("tests.nemesis.caller", 10, 1.0, {"lease_ttl": 5}, ()),
    "guarded": ("tests.nemesis.guarded", 3600, 0.0, {"overlap": "wait", "lease_ttl": 5}, ()),
}  # fmt: skip
POLLER = "poller"


@dataclass
class Figures:
    seed: int
    faults: int = 0
    executions: int = 0
    runs: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    ticks: int = 0
    longest_gap: float = 0.0  # the continuous job's, while some worker was healthy
    crashes: list[str] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    report: str = ""

    def summary(self) -> str:
        return (
            f"seed {self.seed}: {self.faults} faults, {self.executions} executions of "
            f"{self.runs} runs {self.statuses}, {self.ticks} continuous writes (longest gap "
            f"while a worker was healthy {self.longest_gap:.1f}s), {len(self.crashes)} "
            f"processes exited on their own, {len(self.violations)} violations"
        )


def _database_upstream() -> str | tuple[str, int]:
    db = settings.DATABASES["default"]
    host = db.get("HOST") or "127.0.0.1"
    port = int(db.get("PORT") or 5432)
    if host.startswith("/"):  # the embedded server's socket
        return f"{host}/.s.PGSQL.{port}"
    return (host, port)


def _through(proxy: ConnectionCutter) -> str:
    url = urlsplit(live_database_url())
    auth = url.netloc.rpartition("@")[0]
    return f"postgresql://{auth}@127.0.0.1:{proxy.port}{url.path}"


class Nemesis:
    """One run: ``start()`` the cluster, ``inject()`` the faults, ``calm()``, ``check()``."""

    def __init__(self, cluster: Cluster, folder: Path, seed: int, seconds: float) -> None:
        self.cluster = cluster
        self.folder = folder
        self.seed = seed
        self.seconds = seconds
        self.executions_log = folder / "executions.jsonl"
        self.poller_log = folder / "poller.log"
        self.plan = draw(seed, seconds, BEATS, WORKERS, PROXIED)
        self.faults: list[Fault] = []
        self.current: dict[str, str] = {}  # role -> the name of its current incarnation
        self.incarnations = itertools.count(2)
        self.down: set[str] = set()  # roles killed, not yet started again
        self.paused: dict[str, list[int]] = {}  # role or role/child -> pids stopped
        self.redis_folder = folder / "redis"
        self.redis_port = free_port()
        self.redis: subprocess.Popen[bytes] | None = None
        self.proxy = ConnectionCutter(_database_upstream())
        self.proxy_hung = False
        self.crashes: list[str] = []  # processes that exited without being killed
        self.jobs_created = self.calm_start = self.calm_end = 0.0

    # --- the cluster ---------------------------------------------------------------------

    @property
    def broker_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def start(self) -> None:
        self.redis_folder.mkdir(exist_ok=True)
        self.redis = start_redis(self.redis_folder, self.redis_port)
        self.cluster.use_broker(self.broker_url)
        self.cluster.env.update(PROCESS_ENV)
        for role in (*BEATS, *WORKERS):
            self._start(role, role)
        self._wait_ready([*BEATS, *WORKERS])
        self._create_jobs()
        self.jobs_created = time.time()
        log.info("nemesis seed %d: %d faults planned", self.seed, len(self.plan))

    def close(self) -> None:
        for pids in self.paused.values():
            for pid in pids:
                _signal(pid, signal.SIGCONT)
        self.proxy.heal()
        self.cluster.stop_all()
        self.proxy.close()
        if self.redis is not None:
            self.redis.kill()
            self.redis.wait()

    def _start(self, role: str, name: str) -> None:
        env = {"DATABASE_URL": _through(self.proxy)} if role == PROXIED else None
        if role.startswith("beat"):
            self.cluster.start_beat(name, env=env)
        else:
            self.cluster.start_worker(name, concurrency=CONCURRENCY, env=env)
        self.current[role] = name

    def _wait_ready(self, roles: list[str]) -> None:
        def ready(role: str) -> bool:
            text = self.cluster.log_of(self.current[role])
            return ("beat loaded" if role.startswith("beat") else " ready.") in text

        wait_for(lambda: all(ready(r) for r in roles), START_TIMEOUT, f"{roles} ready", poll=0.5)

    def _create_jobs(self) -> None:
        # The job functions named below, known to this process too (create_job checks them).
        import tests.support.jobs_continuous
        import tests.support.jobs_nemesis  # noqa: F401

        for name, (task, every, seconds, policies, after) in JOBS.items():
            schedule = Triggered() if after else Every(int(every or 0))
            kwargs: dict[str, Any] = {"log": str(self.executions_log), "seconds": seconds}
            self._create(name, task, schedule, kwargs, policies, after)
        self._create(POLLER, "tests.continuous.loop", None,
                     {"log": str(self.poller_log), "tick": 0.2}, {}, ())  # fmt: skip

    def _create(self, name: str, task: str, schedule: Any, kwargs: dict[str, Any],
                policies: dict[str, Any], after: tuple[str, ...]) -> None:  # fmt: skip
        policies = {"queue": self.cluster.queue, "start_deadline": START_DEADLINE, **policies}
        if schedule is None:
            policies.pop("start_deadline")
        definition = JobDefinition(name=name, task=task, schedule=schedule, kwargs=kwargs,
                                   policies=policies, after=after)  # fmt: skip
        create_job(definition, actor=Actor.code("nemesis"))

    # --- the faults ----------------------------------------------------------------------

    def inject(self) -> None:
        """Runs the planned faults at their offsets; each ends after its duration."""
        began = time.monotonic()
        events: list[tuple[float, int, str, Planned, float]] = []
        order = itertools.count()
        for planned in self.plan:
            heapq.heappush(events, (planned.at, next(order), "start", planned, 0.0))
        while events:
            at, _, phase, planned, wall_start = heapq.heappop(events)
            self._wait_until(began + at)
            if phase == "start":
                if not self._begin(planned):
                    continue
                now = time.time()
                if planned.seconds:
                    end = (at + planned.seconds, next(order), "end", planned, now)
                    heapq.heappush(events, end)
                else:
                    self._record(planned, now, now)
            else:
                self._finish(planned)
                self._record(planned, wall_start, time.time())

    def _wait_until(self, moment: float) -> None:
        """Until ``moment`` on the monotonic clock (a fault's time, not a synchronisation),
        restarting what exited on its own meanwhile."""

        def due() -> bool:
            self._restart_crashed()
            return time.monotonic() >= moment

        wait_for(due, moment - time.monotonic() + 60, "a fault's time", poll=0.05)

    def _restart_crashed(self) -> None:
        """A beat or worker that exited without being killed is started again at once, as its
        service manager would (deploy/: systemd Restart=always, compose restart policies), and
        recorded as a ``crash``: the checker counts it as a fault, the report shows it."""
        for role, name in list(self.current.items()):
            if role in self.down or self.cluster.processes[name].poll() is None:
                continue
            seen = time.time()
            self._start(role, f"{role}.{next(self.incarnations)}")
            crash = Fault("crash", role, seen, time.time())
            self.faults.append(crash)
            self.crashes.append(
                f"{crash}: {name} exited with {self.cluster.processes[name].returncode}"
            )
            log.warning("nemesis: %s exited on its own; started again", name)

    def _record(self, planned: Planned, start: float, end: float) -> None:
        fault = Fault(planned.kind, planned.target, start, end)
        self.faults.append(fault)
        log.info("nemesis fault %s", fault)

    def _begin(self, planned: Planned) -> bool:
        """Starts ``planned``; ``False`` when it cannot happen now (its target is down or
        already paused, or the broker already restarting)."""
        kind, target = planned.kind, planned.target
        if kind in ("kill", "pause"):
            role = target.split("/")[0]
            if role in self.down or any(key.split("/")[0] == role for key in self.paused):
                return False
            pids = self._pids(target, planned.pick)
            if not pids:
                return False
            if kind == "pause":
                self.paused[target] = pids
                for pid in pids:
                    _signal(pid, signal.SIGSTOP)
                return True
            if target.endswith("/child"):
                _signal(pids[0], signal.SIGKILL)  # the pool starts another
                return True
            if target.endswith("/main"):
                _signal(pids[0], signal.SIGKILL)  # its children orphaned, left to themselves
            else:
                self.cluster.kill(self.current[role])
            self.down.add(role)
            return True
        if kind == "terminate-db":
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                    "AND backend_type = 'client backend'"
                )
            return True
        if kind == "flush-broker":
            if self.redis is None:
                return False
            client = redis.Redis.from_url(self.broker_url)
            try:
                client.flushdb()
            finally:
                client.close()
            return True
        if kind == "restart-broker":
            if self.redis is None:
                return False
            self.redis.kill()
            self.redis.wait()
            self.redis = None
            return True
        if kind == "hang-db":
            if self.proxy_hung:
                return False
            self.proxy_hung = True
            self.proxy.hang()
            return True
        raise ValueError(f"unknown fault {kind}")

    def _finish(self, planned: Planned) -> None:
        kind, target = planned.kind, planned.target
        if kind == "pause":
            for pid in self.paused.pop(target, []):
                _signal(pid, signal.SIGCONT)
        elif kind == "kill" and not target.endswith("/child"):
            role = target.split("/")[0]
            self.down.discard(role)
            self._start(role, f"{role}.{next(self.incarnations)}")
        elif kind == "restart-broker":
            self.redis = start_redis(self.redis_folder, self.redis_port)
        elif kind == "hang-db":
            self.proxy.heal()
            self.proxy_hung = False

    def _pids(self, target: str, pick: int) -> list[int]:
        """The pids a signal to ``target`` reaches: a role's whole process tree, its main process
        alone, or one child."""
        role = target.split("/")[0]
        process = self.cluster.processes[self.current[role]]
        try:
            main = psutil.Process(process.pid)
            children = sorted(child.pid for child in main.children(recursive=True))
        except psutil.NoSuchProcess:
            return []
        if target.endswith("/child"):
            return [children[pick % len(children)]] if children else []
        if target.endswith("/main"):
            return [main.pid]
        return [main.pid, *children]

    # --- calm and check ------------------------------------------------------------------

    def calm(self) -> None:
        """Every process up again, then ``CALM`` seconds without faults."""
        self._wait_ready([*BEATS, *WORKERS])
        self.calm_start = time.time()
        self._wait_until(time.monotonic() + CALM)
        self.calm_end = time.time()

    def check(self) -> Figures:
        shapes = self._shapes()
        window = (_utc(self.calm_start + 5), _utc(self.calm_end - 5))

        def calm_slots_ended() -> bool:
            return not checker.calm_slots_complete(self._runs(), shapes, *window)

        with contextlib.suppress(AssertionError):  # what is still open is reported below
            wait_for(calm_slots_ended, SETTLE, "the calm's slots to end", poll=1)
        runs = self._runs()
        executions = checker.parse_executions(_lines(self.executions_log))
        ticks = checker.parse_ticks(_lines(self.poller_log))
        outages, longest_gap = checker.continuous_outages(
            ticks, self.faults, WORKERS, self.jobs_created, self.calm_end, CONTINUOUS_BOUND
        )
        violations = (
            checker.duplicate_executions(executions, runs, shapes)
            + checker.overlapping_executions(executions, shapes)
            + checker.token_order(executions, shapes)
            + checker.success_without_fence(executions, runs)
            + checker.calm_slots_complete(runs, shapes, *window)
            + checker.nothing_pending(runs, before=_utc(self.calm_start))
            + checker.one_tenure(runs, [POLLER])
            + checker.continuous_token_order(ticks)
            + outages
        )
        statuses: dict[str, int] = {}
        for run in runs:
            statuses[run.status] = statuses.get(run.status, 0) + 1
        figures = Figures(
            seed=self.seed, faults=len(self.faults), executions=len(executions), runs=len(runs),
            statuses=statuses, ticks=len(ticks), longest_gap=longest_gap, crashes=self.crashes,
            violations=violations,
        )  # fmt: skip
        figures.report = checker.report(violations, self.faults, self.seed)
        self._write_history(figures)
        return figures

    def _shapes(self) -> dict[str, JobShape]:
        shapes = {
            name: JobShape(
                name,
                every=None if after else every,
                overlap=policies.get("overlap", "skip"),
                on_lost=policies.get("on_lost", "abandon"),
            )
            for name, (_, every, _, policies, after) in JOBS.items()
        }
        shapes[POLLER] = JobShape(POLLER)
        return shapes

    def _runs(self) -> list[RunRow]:
        rows = JobRun.objects.filter(job__name__in=[*JOBS, POLLER]).values_list(
            "id", "job__name", "scheduled_for", "trigger", "status", "attempt", "retry_of_id",
            "fencing_token",
        )  # fmt: skip
        return [RunRow(*row) for row in rows]

    def _write_history(self, figures: Figures) -> None:
        """The schedule and the figures next to the jobs' own history, for a reader after."""
        lines = [f"seed {self.seed}", *map(str, self.plan), "", *map(str, self.faults), "",
                 *self.crashes, "", figures.summary(), figures.report]  # fmt: skip
        (self.folder / "nemesis.txt").write_text("\n".join(lines) + "\n")


def _signal(pid: int, signum: int) -> None:
    """``signum`` to ``pid``, unless it has just exited (a pool child replaced, say)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _utc(moment: float) -> datetime:
    return datetime.fromtimestamp(moment, tz=UTC)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@contextlib.contextmanager
def nemesis(cluster: Cluster, folder: Path, seed: int, seconds: float) -> Iterator[Nemesis]:
    run = Nemesis(cluster, folder, seed, seconds)
    try:
        run.start()
        yield run
    finally:
        run.close()
