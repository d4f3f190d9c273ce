"""The catch-up policies on slots nobody fired: pure decisions, no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from jobs.schedule.catchup import CURRENT_SLOT_GRACE, MAX_MISSED_RECORDED, NO_BEAT, plan
from jobs.schedule.kinds import At, Cron, Every
from jobs.schedule.slots import next_slot

T = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)


def _s(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


def test_latest_runs_the_newest_missed_slot_and_records_the_others() -> None:
    decided = plan(
        Every(10), after=_s(0), now=_s(53), policy="latest", start_deadline=300, why=NO_BEAT
    )
    assert decided.run == _s(50)
    assert [slot for slot, _ in decided.missed] == [_s(10), _s(20), _s(30), _s(40)]
    assert all("catch-up policy latest" in reason for _, reason in decided.missed)
    assert decided.handled_until == _s(50)


def test_latest_records_the_newest_too_when_its_deadline_passed() -> None:
    decided = plan(
        Every(10), after=_s(0), now=_s(58), policy="latest", start_deadline=5, why=NO_BEAT
    )
    assert decided.run is None
    assert decided.missed[-1][0] == _s(50)
    assert "past its start deadline of 5 s" in decided.missed[-1][1]


def test_none_records_everything_but_a_current_slot() -> None:
    late = plan(Every(10), after=_s(0), now=_s(56), policy="none", start_deadline=300, why=NO_BEAT)
    assert late.run is None and [slot for slot, _ in late.missed][-1] == _s(50)
    current = plan(
        Every(10), after=_s(0), now=_s(54), policy="none", start_deadline=300, why=NO_BEAT
    )
    assert current.run == _s(50) and len(current.missed) == 4
    # The grace is at most half an interval: a 2 s job's slot is current for 1 s only.
    short = plan(
        Every(2), after=_s(0), now=_s(51.5), policy="none", start_deadline=300, why=NO_BEAT
    )
    assert short.run is None


def test_none_never_runs_the_current_slot_past_its_start_deadline() -> None:
    # Found by the property below: a 1 s deadline is shorter than the current slot's grace.
    decided = plan(
        Every(10), after=_s(40), now=_s(53), policy="none", start_deadline=1, why=NO_BEAT
    )
    assert decided.run is None
    assert [slot for slot, _ in decided.missed] == [_s(50)]


def test_nothing_owed_keeps_the_position() -> None:
    decided = plan(
        Every(60), after=_s(0), now=_s(59), policy="latest", start_deadline=300, why=NO_BEAT
    )
    assert decided.run is None and decided.missed == [] and decided.handled_until == _s(0)
    assert next_slot(Every(60), decided.handled_until) == _s(60)


def test_a_week_of_a_one_second_job_records_a_thousand_slots() -> None:
    decided = plan(
        Every(1), after=_s(0), now=_s(7 * 86400), policy="latest", start_deadline=300, why=NO_BEAT
    )
    assert decided.run == _s(7 * 86400)
    assert len(decided.missed) == MAX_MISSED_RECORDED - 1
    oldest_slot, oldest_reason = decided.missed[0]
    assert oldest_slot == _s(7 * 86400 - 999)
    assert f"and {7 * 86400 - 1000} earlier slot(s) from {_s(1).isoformat()} on" in oldest_reason


def test_a_cron_window_beyond_the_limit_is_summarised_without_a_count() -> None:
    decided = plan(
        Cron("* * * * *"), after=_s(0), now=_s(2 * 86400 + 30), policy="none", start_deadline=60,
        why=NO_BEAT,
    )  # fmt: skip
    assert len(decided.missed) == MAX_MISSED_RECORDED
    assert "earlier slots from" in decided.missed[0][1]


def test_a_one_off_is_owed_once() -> None:
    decided = plan(
        At(_s(-30)), after=datetime.min.replace(tzinfo=UTC), now=_s(0), policy="latest",
        start_deadline=300, why=NO_BEAT,
    )  # fmt: skip
    assert decided.run == _s(-30) and decided.missed == []


@given(
    seconds=st.integers(1, 3600),
    gap=st.floats(0, 50_000),
    policy=st.sampled_from(["latest", "none"]),
    deadline=st.integers(1, 3600),
)
def test_every_slot_of_the_gap_is_decided_exactly_once(
    seconds: int, gap: float, policy: str, deadline: int
) -> None:
    schedule = Every(seconds)
    after, now = _s(0), _s(gap)
    decided = plan(schedule, after=after, now=now, policy=policy, start_deadline=deadline, why="x")
    decided_slots = [slot for slot, _ in decided.missed] + (
        [decided.run] if decided.run is not None else []
    )
    assert len(decided_slots) == len(set(decided_slots))
    assert all(after < slot <= now for slot in decided_slots)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    step = timedelta(seconds=seconds)
    owed = (now - epoch) // step - (after - epoch) // step  # grid points in (after, now]
    assert len(decided_slots) == min(owed, MAX_MISSED_RECORDED)
    if decided.run is not None:  # only ever the newest, and never one that would start late
        assert decided.run == max(decided_slots)
        age = now - decided.run
        assert age <= timedelta(seconds=deadline)
        assert policy == "latest" or age < min(CURRENT_SLOT_GRACE, timedelta(seconds=seconds) / 2)
    # The beat continues right after what was decided: nothing is decided twice or skipped.
    following = next_slot(schedule, decided.handled_until)
    assert following is not None and following > now
