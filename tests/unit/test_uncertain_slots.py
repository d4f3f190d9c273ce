"""Slots whose insert a beat saw fail though it may have committed (jobs.beat.uncertain_slots):
when recorded again, the runs still scheduled that this insert did not create are published too;
each slot is settled once, and old ones are forgotten."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from jobs.beat import uncertain_slots
from jobs.beat.uncertain_slots import FORGET_AFTER, UncertainSlots
from jobs.guard.run_records import NewRun

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
A, B, C = (1, NOW), (2, NOW), (3, NOW)


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[int, datetime]]]:
    """The slots whose still-scheduled runs were looked up; each is answered with a run."""
    asked: list[list[tuple[int, datetime]]] = []

    def scheduled_runs_of(pairs: Sequence[tuple[int, datetime]]) -> list[NewRun]:
        asked.append(list(pairs))
        return [
            NewRun(run_id=100 + job_id, job_id=job_id, scheduled_for=at) for job_id, at in pairs
        ]

    monkeypatch.setattr(uncertain_slots.slot_records, "scheduled_runs_of", scheduled_runs_of)
    return asked


def test_uncertain_slots_recorded_again_and_not_created_are_published(
    asked: list[list[tuple[int, datetime]]],
) -> None:
    slots = UncertainSlots()
    slots.add([A, B])
    assert len(slots) == 2
    won = [NewRun(run_id=7, job_id=2, scheduled_for=NOW)]  # B's insert created its run now
    to_publish = slots.settle([A, B, C], won)
    assert asked == [[A]]
    assert [run.run_id for run in to_publish] == [101]
    assert len(slots) == 0
    assert slots.settle([A, B], []) == []  # settled once


def test_nothing_uncertain_asks_nothing(asked: list[list[tuple[int, datetime]]]) -> None:
    slots = UncertainSlots()
    assert slots.settle([A], []) == []
    slots.add([B])
    assert slots.settle([A], []) == [] and len(slots) == 1
    assert asked == []


def test_slots_older_than_a_day_are_forgotten() -> None:
    slots = UncertainSlots()
    old = (4, NOW - FORGET_AFTER - timedelta(seconds=1))
    slots.add([old, A])
    slots.forget_older_than(NOW)
    assert len(slots) == 1
