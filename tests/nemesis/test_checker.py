"""The checker cannot pass vacuously: planted histories, each with one violation, are reported;
a clean history of the same shape is not."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta

from tests.nemesis import checker
from tests.nemesis.checker import Execution, Fault, JobShape, RunRow, Tick

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
BASE = T0.timestamp()
JOBS = {
    "skip": JobShape("skip", every=2, overlap="skip"),
    "retry": JobShape("retry", every=2, overlap="wait", on_lost="retry"),
    "free": JobShape("free", every=2, overlap="allow"),
}


def _slot(n: int) -> datetime:
    return T0 + timedelta(seconds=2 * n)


def _exec(
    run: int, job: str = "skip", slot: int = 0, token: int = 1, start: float = 0.0,
    fence: float | None = 0.5, outcome: str | None = "committed", pid: int = 100,
) -> Execution:  # fmt: skip
    return Execution(
        job=job, slot=_slot(slot), run=run, token=token, attempt=1, key=f"job:{job}",
        pid=pid, start=BASE + start, fence=None if fence is None else BASE + fence,
        end=None if fence is None else BASE + fence + 0.01, outcome=outcome,
    )  # fmt: skip


def _row(run: int, job: str = "skip", slot: int = 0, status: str = "succeeded", **kw) -> RunRow:
    return RunRow(id=run, job=job, slot=_slot(slot), trigger=kw.pop("trigger", "scheduled"),
                  status=status, **kw)  # fmt: skip


def _checks(executions: list[Execution], runs: list[RunRow]) -> list[str]:
    found = (
        checker.duplicate_executions(executions, runs, JOBS)
        + checker.overlapping_executions(executions, JOBS)
        + checker.token_order(executions, JOBS)
        + checker.success_without_fence(executions, runs)
    )
    return [v.check for v in found]


def test_a_clean_history_passes() -> None:
    executions = [_exec(1, slot=0, token=1, start=0), _exec(2, slot=1, token=2, start=2)]
    runs = [_row(1, slot=0), _row(2, slot=1)]
    assert _checks(executions, runs) == []
    assert checker.calm_slots_complete(runs, {"skip": JOBS["skip"]}, _slot(0), _slot(1)) == []


def test_two_executions_of_one_slot_are_reported() -> None:
    # As if the one-run-per-slot index were gone: two runs of one slot, both executed.
    executions = [_exec(1, token=1, start=0), _exec(2, token=2, start=1)]
    runs = [_row(1), _row(2)]
    assert _checks(executions, runs) == ["slot-twice"]


def test_one_run_executed_twice_is_reported() -> None:
    executions = [_exec(1, token=1, start=0, pid=100), _exec(1, token=2, start=1, pid=200)]
    assert "run-twice" in _checks(executions, [_row(1)])


def test_a_retry_after_a_loss_is_allowed_only_when_the_job_retries() -> None:
    retried = [_exec(1, job="retry", token=1, start=0, fence=None, outcome=None),
               _exec(2, job="retry", token=2, start=5)]  # fmt: skip
    runs = [
        _row(1, job="retry", status="lost"),
        _row(2, job="retry", status="succeeded", trigger="retry", retry_of=1, attempt=2),
    ]
    assert _checks(retried, runs) == []
    # The same history for a job that abandons lost runs: the slot ran twice.
    abandoned = [_exec(1, token=1, start=0, fence=None, outcome=None), _exec(2, token=2, start=5)]
    runs = [_row(1, status="lost"), _row(2, status="succeeded", trigger="retry", retry_of=1)]
    assert _checks(abandoned, runs) == ["slot-twice"]


def test_overlapping_executions_under_a_skip_policy_are_reported() -> None:
    executions = [_exec(1, slot=0, token=1, start=0, fence=3), _exec(2, slot=1, token=2, start=2)]
    assert _checks(executions, [_row(1, slot=0), _row(2, slot=1)]) == ["overlap"]


def test_overlap_is_fine_where_allowed_or_fenced_out() -> None:
    allowed = [_exec(1, job="free", token=1, start=0, fence=3),
               _exec(2, job="free", slot=1, token=2, start=2)]  # fmt: skip
    assert _checks(allowed, [_row(1, job="free"), _row(2, job="free", slot=1)]) == []
    # A paused holder whose check was refused overlaps its successor: fencing covers it.
    paused = [_exec(1, token=1, start=0, fence=9, outcome="rejected"),
              _exec(2, slot=1, token=2, start=2)]  # fmt: skip
    assert _checks(paused, [_row(1, status="lost"), _row(2, slot=1)]) == []


def test_tokens_out_of_order_are_reported() -> None:
    executions = [_exec(1, slot=0, token=5, start=0), _exec(2, slot=1, token=4, start=2)]
    assert _checks(executions, [_row(1, slot=0), _row(2, slot=1)]) == ["token-order"]


def test_a_success_whose_fenced_check_was_refused_is_reported() -> None:
    executions = [_exec(1, token=1, outcome="rejected")]
    assert _checks(executions, [_row(1, status="succeeded")]) == ["fencing"]


def test_a_slot_with_no_record_or_no_terminal_one_is_reported() -> None:
    runs = [_row(1, slot=0), _row(3, slot=2, status="running"), _row(4, slot=3)]
    found = checker.calm_slots_complete(runs, {"skip": JOBS["skip"]}, _slot(0), _slot(3))
    assert [v.message.split(": ")[0] for v in found] == [
        f"skip slot {_slot(1).isoformat()}",
        f"skip slot {_slot(2).isoformat()}",
    ]
    assert "no run" in found[0].message and "['running']" in found[1].message


def test_runs_left_pending_are_reported() -> None:
    runs = [_row(1, status="running"), _row(2, slot=5, status="scheduled"),
            _row(3, status="running", trigger="continuous")]  # fmt: skip
    found = checker.nothing_pending(runs, before=_slot(3))
    assert [v.check for v in found] == ["pending"] and "run 1 " in found[0].message


def test_the_continuous_job_must_come_back_while_a_worker_is_healthy() -> None:
    faults = [Fault("pause", "worker-1/child", BASE + 10, BASE + 30),
              Fault("kill", "worker-2", BASE + 20, BASE + 25),
              Fault("flush-broker", "broker", BASE + 40, BASE + 40)]  # fmt: skip
    spans = checker.healthy_spans(faults, ["worker-1", "worker-2"], BASE, BASE + 100)
    assert spans == [(BASE, BASE + 20), (BASE + 25, BASE + 100)]
    # Silent from 15 to 35 (both workers down 20-25: not counted), then from 40 to 80.
    ticks = [Tick("poller", 1, 1, BASE + t) for t in (1, 8, 15, 35, 40)]
    ticks += [Tick("poller", 2, 2, BASE + t) for t in (80, 95)]
    problems, longest = checker.continuous_outages(
        ticks, faults, ["worker-1", "worker-2"], BASE, BASE + 100, bound=20
    )
    assert [v.message.split(" (")[0] for v in problems] == [
        f"no accepted write from {BASE + 40:.3f} to {BASE + 80:.3f}"
    ]
    assert longest == 40.0


def test_continuous_tokens_going_back_are_reported() -> None:
    ticks = [Tick("poller", 2, 1, BASE + 1), Tick("poller", 1, 2, BASE + 2)]
    assert [v.check for v in checker.continuous_token_order(ticks)] == ["continuous-token"]


def test_the_report_names_the_seed_and_the_faults_around_each_violation() -> None:
    faults = [Fault("flushdb", "broker", BASE + 1, BASE + 1),
              Fault("sigkill", "beat-1", BASE + 300, BASE + 300)]  # fmt: skip
    text = checker.report([checker.Violation("overlap", "two at once", BASE + 5)], faults, 42)
    assert "NEMESIS_SEED=42" in text and "flushdb(broker)" in text and "beat-1" not in text


def test_the_history_is_parsed_from_the_jobs_own_lines() -> None:
    start = {"e": "start", "job": "skip", "slot": _slot(0).isoformat(), "run": 7, "token": 3,
             "attempt": 1, "key": "job:skip", "pid": 9, "t": BASE}  # fmt: skip
    end = {**start, "e": "end", "fence": BASE + 1, "t": BASE + 1.1, "outcome": "committed"}
    died = {**start, "run": 8, "pid": 10}
    again = {**start, "t": BASE + 2}  # run 7 delivered again to the same process
    lines = [json.dumps(start), json.dumps(died), json.dumps(end), json.dumps(again), '{"e": "s']
    parsed = checker.parse_executions(lines)
    assert [(e.run, e.outcome, e.token) for e in parsed] == [
        (7, "committed", 3), (8, None, 3), (7, None, 3),
    ]  # fmt: skip
    assert "run-twice" in [v.check for v in checker.duplicate_executions(parsed, [], JOBS)]
    assert parsed[0].slot == _slot(0)
    ticks = checker.parse_ticks(["start poller 2 5 1.0", "tick poller 2 5 1.5", "tick poll"])
    assert ticks == [Tick("poller", 2, 5, 1.5)]


def test_the_schedule_replays_from_its_seed() -> None:
    from tests.nemesis.schedule import draw

    first = draw(7, 300, ["beat-1", "beat-2"], ["worker-1", "worker-2"], "worker-2")
    assert first == draw(7, 300, ["beat-1", "beat-2"], ["worker-1", "worker-2"], "worker-2")
    assert first != draw(8, 300, ["beat-1", "beat-2"], ["worker-1", "worker-2"], "worker-2")
    kinds = {planned.kind for planned in first}
    assert kinds >= {"kill", "pause", "terminate-db", "flush-broker", "hang-db"}
    assert all(p.seconds == 0 for p in first if p.kind == "kill" and "/child" in p.target)
    assert {"worker-1/main", "worker-2/child", "beat-1"} <= {p.target for p in first}
    assert any(a.at == b.at for a, b in itertools.pairwise(first))  # several at once
