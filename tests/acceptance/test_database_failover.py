"""Issue 31 acceptance: the database fails over to a standby under a running cluster.

Each test starts a PostgreSQL primary and a streaming standby of its own (Debian's binaries,
tests/support/replication.py; missing binaries fail the test, never skip it). Two beats and a
worker reach the database through a relay the test moves, as a virtual IP or a DNS name is
moved in production: the primary is killed (an immediate stop: no shutdown, no flush), the
standby promoted, the relay pointed at it.

- Synchronous replication (``synchronous_standby_names`` naming the standby,
  ``synchronous_commit = on``): every guarantee holds across the failover. Each slot has one
  record and ran once, each job's fencing tokens keep growing, and a holder from before the
  failover is fenced out afterwards (its fenced write and its finish are refused).
- Asynchronous replication, the standby's WAL cut for the last seconds before the crash: what
  the promoted standby forgot is measured from the jobs' own side effects (``tests.record``
  appends a line per execution, to a file per job) against the run table it kept.

Executions are counted from those files and runs from the database; the figures each test
measured are printed (``pytest -s``) and written to ``failover-report.json`` in its tmp_path.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.utils import timezone

from jobs.guard import token_watch
from tests.acceptance.conftest import Cluster, wait_for
from tests.support.replication import (
    ReplicatedPostgres,
    ReplicationUnavailable,
    replicated_postgres,
)

pytestmark = pytest.mark.acceptance

BEAT_ENV = {"JOBS_MAINTENANCE_INTERVAL": "0.5", "JOBS_REPUBLISH_AFTER": "2"}
START_TIMEOUT = 90  # several Python processes starting at once on a small machine
JOBS = ["tick-0", "tick-1"]  # every second each
PROBE_TTL = 3  # seconds (the least a job takes): the probe's old lease lapses soon after


# The tests ask for their pair before the cluster: its processes are stopped first, while the
# database they reach still answers.
def _pair(synchronous: bool) -> Iterator[ReplicatedPostgres]:
    try:
        with replicated_postgres(synchronous=synchronous) as pair:
            yield pair
    except ReplicationUnavailable as exc:
        pytest.fail(str(exc))


@pytest.fixture
def synchronous_pair() -> Iterator[ReplicatedPostgres]:
    yield from _pair(synchronous=True)


@pytest.fixture
def asynchronous_pair() -> Iterator[ReplicatedPostgres]:
    yield from _pair(synchronous=False)


# --- what the jobs did, and what the database says ---------------------------------------------


Execution = tuple[int, datetime, int]  # run id, slot, token


def _executions(tmp_path: Path, name: str) -> list[Execution]:
    path = tmp_path / f"{name}.log"
    if not path.exists():
        return []
    lines = [line.split() for line in path.read_text().splitlines() if line]
    return [(int(run), datetime.fromisoformat(slot), int(token)) for run, slot, token, *_ in lines]


Run = tuple[int, datetime, str, int, datetime | None]  # run id, slot, status, token, started


def _runs(url: str, name: str) -> list[Run]:
    """Job ``name``'s scheduled runs, by slot."""
    with psycopg.connect(url, connect_timeout=5) as conn:
        rows = conn.execute(
            "SELECT r.id, r.scheduled_for, r.status, r.fencing_token, r.started_at"
            "  FROM jobs_jobrun AS r JOIN jobs_job AS j ON j.id = r.job_id"
            " WHERE j.name = %s AND r.trigger = 'scheduled' ORDER BY r.scheduled_for",
            [name],
        ).fetchall()
    return [(int(i), s, str(st), int(t or 0), at) for i, s, st, t, at in rows]


def _grid(start: datetime, end: datetime) -> list[datetime]:
    """The slots of an every-second job in ``[start, end]``."""
    first = start.replace(microsecond=0)
    if first < start:
        first += timedelta(seconds=1)
    return [first + timedelta(seconds=i) for i in range(int((end - first).total_seconds()) + 1)]


def _wait_until(moment: datetime) -> None:
    wait_for(lambda: timezone.now() >= moment, timeout=120, what=moment.isoformat())


def _half_second_after(moment: datetime) -> datetime:
    """The next instant half-way between two slots: no claim is then in flight (see
    test_beats_cluster's database restart: a claim cut as it commits is a worker failure's
    record, ``lost``, not this test's subject)."""
    half = moment.replace(microsecond=500_000)
    return half if half > moment else half + timedelta(seconds=1)


def _settled(url: str, start: datetime, end: datetime) -> bool:
    slots = _grid(start, end)
    for name in JOBS:
        window = [run for run in _runs(url, name) if start <= run[1] <= end]
        if len(window) < len(slots) or any(run[2] in ("scheduled", "running") for run in window):
            return False
    return True


# --- the cluster --------------------------------------------------------------------------------


def _start_cluster(cluster: Cluster, pair: ReplicatedPostgres, tmp_path: Path) -> None:
    cluster.env.update(DATABASE_URL=pair.url)
    migrated = cluster.manage("migrate", "--noinput", "-v", "0")
    assert migrated.returncode == 0, migrated.stderr
    created = _probe(
        cluster, f"create_jobs({JOBS!r}, {str(tmp_path)!r}, {cluster.queue!r}, {PROBE_TTL})"
    )
    assert created["created"] == [*JOBS, "probe"]
    cluster.start_worker("worker", concurrency=1)  # a backlog runs one at a time
    for beat in ("beat-1", "beat-2"):
        cluster.start_beat(beat, env=BEAT_ENV)

    def started() -> bool:
        return all("beat loaded" in cluster.log_of(b) for b in ("beat-1", "beat-2")) and (
            " ready." in cluster.log_of("worker")
        )

    wait_for(started, timeout=START_TIMEOUT, what="beats loaded and the worker ready", poll=0.5)


def _probe(cluster: Cluster, call: str) -> Any:
    done = cluster.manage("shell", "-c", f"from tests.support import failover_probe as p; p.{call}")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _report(tmp_path: Path, figures: dict[str, Any]) -> None:
    text = json.dumps(figures, indent=2, default=str)
    (tmp_path / "failover-report.json").write_text(text)
    print(f"\nfailover report:\n{text}")


def _all_alive(cluster: Cluster) -> bool:
    return all(process.poll() is None for process in cluster.processes.values())


# --- the tests ----------------------------------------------------------------------------------


def test_with_synchronous_replication_every_guarantee_holds_across_a_failover(
    synchronous_pair: ReplicatedPostgres, cluster: Cluster, tmp_path: Path
) -> None:
    pair = synchronous_pair
    _start_cluster(cluster, pair, tmp_path)
    start = timezone.now().replace(microsecond=0) + timedelta(seconds=2)
    _wait_until(start + timedelta(seconds=3))
    old = _probe(cluster, "take('old-holder')")
    failed_over_at = _half_second_after(timezone.now())
    _wait_until(failed_over_at)
    pair.fail_over()
    end = timezone.now() + timedelta(seconds=5)
    _wait_until(end + timedelta(seconds=1))
    probe = _probe(cluster, f"take_over({old['run']}, {old['token']})")
    wait_for(lambda: _settled(pair.url, start, end), 60, "every slot of the window recorded")
    assert _all_alive(cluster), "a beat or the worker died"

    figures: dict[str, Any] = {"replication": "synchronous", "probe": {"old": old, **probe}}
    for name in JOBS:
        runs = [run for run in _runs(pair.url, name) if start <= run[1] <= end]
        executions = _executions(tmp_path, name)
        slots_run = Counter(slot for _run, slot, _token in executions)
        # One record per slot, each succeeded and executed once: nothing forgotten, no double.
        assert [run[1] for run in runs] == _grid(start, end), f"{name}: one record per slot"
        assert {run[2] for run in runs} == {"succeeded"}, f"{name}: {Counter(r[2] for r in runs)}"
        assert all(slots_run[run[1]] == 1 for run in runs), f"{name}: a slot ran twice or never"
        assert max(slots_run.values()) == 1, f"{name}: a slot ran twice"
        recorded = {(run[0], run[1], run[3]) for run in _runs(pair.url, name)}
        assert set(executions) <= recorded, f"{name}: an execution the database forgot"
        # Tokens keep growing across the failover, in the order the runs were claimed.
        tokens = [run[3] for run in sorted(runs, key=lambda run: (run[4], run[0]))]
        assert tokens == sorted(set(tokens)), f"{name}: fencing tokens did not keep growing"
        before = [run[3] for run in runs if run[1] < failed_over_at]
        after = [run[3] for run in runs if run[1] > failed_over_at]
        assert before and after and min(after) > max(before), name
        figures[name] = {"slots": len(runs), "tokens_before": before, "tokens_after": after}
    # The holder from before the failover is fenced out after it.
    assert probe["new_token"] > old["token"]
    assert probe["old_fenced_write"] == "rejected"
    assert probe["old_finish"] != "succeeded" and probe["old_run_after"][0] == "lost"
    assert probe["new_still_holds_after_old_finish"] is True
    assert probe["new_finish"] == "succeeded"
    _report(tmp_path, figures)


def test_with_asynchronous_replication_a_failover_forgets_runs_and_the_worker_stops(
    asynchronous_pair: ReplicatedPostgres, cluster: Cluster, tmp_path: Path
) -> None:
    """The standby receives nothing in the last seconds before the primary crashes (its
    replication connection cut: a lagging standby, a network hiccup): what the primary committed
    meanwhile is gone once the standby is promoted. Measured, and asserted where it is certain:
    executions the new primary has no record of, lease tokens it hands out again, a holder from
    before the failover it cannot fence out. The worker, handed a token no higher than one it
    held (jobs.guard.token_watch), runs nothing more and says so in its log and ``/healthz``."""
    pair = asynchronous_pair
    _start_cluster(cluster, pair, tmp_path)
    start = timezone.now().replace(microsecond=0) + timedelta(seconds=2)
    _wait_until(start + timedelta(seconds=3))
    pair.wait_caught_up()
    # Cut half-way between two slots too: a run cut in the middle would be running on the new
    # primary, its lease held for a ttl (30 s), and that job's next slots skipped meanwhile.
    cut_at = _half_second_after(timezone.now())
    _wait_until(cut_at)
    pair.cut_replication()
    old = _probe(cluster, "take('old-holder')")  # committed on the primary only
    failed_over_at = _half_second_after(max(timezone.now(), cut_at + timedelta(seconds=3)))
    _wait_until(failed_over_at)
    pair.fail_over()
    after = _half_second_after(timezone.now())
    end = after + timedelta(seconds=4)
    _wait_until(end + timedelta(seconds=1))
    probe = _probe(cluster, f"take_over({old['run']}, {old['token']})")
    wait_for(lambda: _settled(pair.url, after, end), 60, "every slot after the failover recorded")
    assert _all_alive(cluster), "a beat or the worker died"

    figures: dict[str, Any] = {
        "replication": "asynchronous",
        "replication_cut_seconds_before_crash": round((failed_over_at - cut_at).total_seconds(), 1),
        "probe": {"old": old, **probe},
    }
    forgotten_total = reissued_total = refused_total = 0
    for name in JOBS:
        runs = _runs(pair.url, name)
        executions = _executions(tmp_path, name)
        recorded = {(run[0], run[1]): run for run in runs}
        # Executions whose record the promoted standby does not have (or has, not succeeded).
        forgotten = [
            e for e in executions
            if (e[0], e[1]) not in recorded or recorded[e[0], e[1]][2] != "succeeded"
        ]  # fmt: skip
        slots_run = Counter(slot for _run, slot, _token in executions)
        executed_tokens = [token for _run, _slot, token in executions]
        # The tokens the new primary handed out that executions had already used.
        after_runs = [run for run in runs if run[1] > failed_over_at and run[3]]
        reissued = sorted({run[3] for run in after_runs} & set(executed_tokens))
        # After the failover: one record per slot, none executed: the worker refused them all
        # (or, for a job whose lease the new primary still saw held, skipped them).
        window = [run for run in runs if after <= run[1] <= end]
        assert [run[1] for run in window] == _grid(after, end), f"{name}: one record per slot"
        assert {run[2] for run in window} <= {"failed", "skipped"}, name
        refused_total += sum(run[2] == "failed" for run in window)
        assert all(slots_run[run[1]] == 0 for run in window), f"{name}: ran after the failover"
        assert max(slots_run.values()) == 1, f"{name}: a slot ran twice"
        assert len(executed_tokens) == len(set(executed_tokens)), f"{name}: a token ran twice"
        forgotten_total += len(forgotten)
        reissued_total += len(reissued)
        figures[name] = {
            "executions": len(executions),
            "executions_forgotten_by_the_new_primary": [
                (run, slot.isoformat(), token) for run, slot, token in forgotten
            ],
            "tokens_executed_before_failover": sorted(executed_tokens),
            "tokens_handed_out_again_after_failover": reissued,
            "runs_after_failover": dict(Counter(run[2] for run in window)),
        }
    # What is certain once commits are lost: the executions of the cut seconds are forgotten,
    # the lease tokens handed out in them are handed out again, and a holder from before the
    # failover is not fenced out by the holder after it (same token): the database alone can no
    # longer tell them apart.
    assert forgotten_total > 0, figures
    assert reissued_total > 0, figures
    assert probe["new_token"] == old["token"], figures
    assert probe["old_fenced_write"] == "accepted", figures
    assert probe["new_still_holds_after_old_finish"] is False, figures
    # The worker noticed, stopped, and said so.
    assert refused_total > 0, figures
    assert "lost acknowledged commits" in cluster.log_of("worker")
    assert token_watch.CAUSE in probe["problems"], figures
    _report(tmp_path, figures)
