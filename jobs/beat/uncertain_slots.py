"""Slots whose recording a beat saw fail, though it may have committed.

A connection that breaks after the insert of a chunk of slots committed, before its reply came
back, looks to the beat like an insert that failed: it keeps the slots and records them again at
its next tick, and that insert then creates nothing (the runs exist), which means "another beat
won them" and so nothing to publish. The runs would wait, ``scheduled`` and unsent, until
maintenance re-publishes them ``JOBS_REPUBLISH_AFTER`` later. So the beat remembers such slots
and, when it records them again, publishes the ones still ``scheduled`` that its insert did not
create: their message may already be out (another beat did win them), and a second delivery is
a counted no-op at the claim, whereas a slot left unsent starts late.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from jobs.beat import slot_records
from jobs.guard import run_records

# Slots older than this are forgotten (a job deleted meanwhile, slots caught up as missed).
FORGET_AFTER = timedelta(days=1)

Slot = tuple[int, datetime]  # (job id, slot)


class UncertainSlots:
    def __init__(self) -> None:
        self._slots: set[Slot] = set()

    def __len__(self) -> int:
        return len(self._slots)

    def add(self, slots: Iterable[Slot]) -> None:
        """Slots whose insert failed in a way that may have committed (a broken connection)."""
        self._slots.update(slots)

    def settle(
        self, recorded: Sequence[Slot], won: Sequence[run_records.NewRun]
    ) -> list[run_records.NewRun]:
        """``recorded`` were just inserted again, creating ``won``: the runs of the uncertain
        ones among them that are still ``scheduled`` and not in ``won``, to publish as well."""
        if not self._slots:
            return []
        uncertain = [slot for slot in recorded if slot in self._slots]
        if not uncertain:
            return []
        self._slots.difference_update(uncertain)
        created = {(run.job_id, run.scheduled_for) for run in won}
        return slot_records.scheduled_runs_of([slot for slot in uncertain if slot not in created])

    def forget_older_than(self, now: datetime) -> None:
        if self._slots:
            self._slots = {slot for slot in self._slots if slot[1] >= now - FORGET_AFTER}
