"""DST as slots meet it (``jobs.schedule.dst``): the offset changes of a zone found to the second
and named in the zone and in UTC; a wall time a spring gap swallows said to run at the gap's end,
a repeated one said to run once, at its first pass (the cron kind's rule) or twice (an interval,
whose slots are UTC instants)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobs.schedule import dst
from jobs.schedule.kinds import Cron, Every

PARIS = "Europe/Paris"


def test_a_zone_s_changes_are_found_to_the_second() -> None:
    year = dst.transitions(
        PARIS, datetime(2027, 1, 1, tzinfo=UTC), datetime(2028, 1, 1, tzinfo=UTC)
    )
    assert [(t.at, t.forward, t.name_before, t.name_after) for t in year] == [
        (datetime(2027, 3, 28, 1, 0, tzinfo=UTC), True, "CET", "CEST"),
        (datetime(2027, 10, 31, 1, 0, tzinfo=UTC), False, "CEST", "CET"),
    ]
    assert (
        dst.transitions("UTC", datetime(2027, 1, 1, tzinfo=UTC), datetime(2028, 1, 1, tzinfo=UTC))
        == []
    )


def test_a_slot_in_the_spring_gap_says_it_runs_at_the_gap_s_end() -> None:
    cron = Cron("30 2 * * *", PARIS)
    slot = datetime(2027, 3, 28, 1, 0, tzinfo=UTC)
    assert cron.next_slot(slot - timedelta(hours=2)) == slot  # the kind's own rule
    assert dst.notes(cron, slot, PARIS, previous=datetime(2027, 3, 27, 1, 30, tzinfo=UTC)) == [
        "spring forward in Europe/Paris on 2027-03-28: 02:00 CET becomes 03:00 CEST (01:00 UTC); "
        "02:30 does not exist that day: it runs at 03:00 CEST (01:00 UTC), the end of the gap"
    ]


def test_a_slot_at_03_00_on_the_spring_day_was_not_moved() -> None:
    cron = Cron("0 3 * * *", PARIS)
    slot = datetime(2027, 3, 28, 1, 0, tzinfo=UTC)
    assert dst.notes(cron, slot, PARIS, previous=datetime(2027, 3, 27, 2, 0, tzinfo=UTC)) == [
        "spring forward in Europe/Paris on 2027-03-28: 02:00 CET becomes 03:00 CEST (01:00 UTC)"
    ]


def test_an_interval_runs_at_both_passes_of_a_repeated_time() -> None:
    every = Every(1800)
    first = datetime(2027, 10, 31, 0, 30, tzinfo=UTC)
    second = datetime(2027, 10, 31, 1, 30, tzinfo=UTC)
    assert dst.notes(every, first, PARIS, previous=first - timedelta(minutes=30))[-1].endswith(
        "this is the first, a slot at the second follows"
    )
    assert dst.notes(every, second, PARIS, previous=second - timedelta(minutes=30)) == [
        "02:30 comes twice on 2027-10-31 in Europe/Paris: CEST (00:30 UTC), then CET "
        "(01:30 UTC); this is the second"
    ]


def test_nothing_is_crossed_without_a_slot_before() -> None:
    slot = datetime(2027, 3, 28, 1, 0, tzinfo=UTC)
    assert dst.notes(Cron("30 2 * * *", PARIS), slot, PARIS, previous=None) == []
