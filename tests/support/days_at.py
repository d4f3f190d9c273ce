"""A schedule kind that exists only in the test suite, "every N days at HH:MM" (UTC): the proof
that adding a kind is one module (this one) and its test (tests/integration/test_added_kind.py),
with no file of ``jobs/`` changed. Registered by the tests that use it (``registered_days_at``),
first, so that it reads the rows it writes (an interval in days with a start time) before the
interval kind does."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.core.exceptions import ValidationError

from jobs.schedule.kind import Row, ScheduleKind, register, unregister


@dataclass(frozen=True)
class DaysAt(ScheduleKind):
    """Every ``days`` days at ``at`` (UTC), from the day ``since``. On the admin form: the
    interval's box in whole days ("2d") and the one-off's date and time (the first slot)."""

    form_choice, form_label, form_fields = "days_at", "every N days at", ("every", "run_at")
    days: int
    at: time
    since: date

    def __post_init__(self) -> None:
        if self.days < 1:
            raise ValueError("the number of days must be at least 1")

    @property
    def _first(self) -> datetime:
        return datetime.combine(self.since, self.at, UTC)

    def latest_slot(self, now: datetime) -> datetime | None:
        if now < self._first:
            return None
        return self._first + timedelta(days=(now - self._first).days // self.days * self.days)

    def next_slot(self, now: datetime) -> datetime | None:
        latest = self.latest_slot(now)
        return self._first if latest is None else latest + timedelta(days=self.days)

    def describe(self) -> str:
        return f"every {self.days} days at {self.at:%H:%M} (UTC), from {self.since.isoformat()}"

    def form_initial(self) -> dict[str, Any]:
        return {"every": f"{self.days}d", "run_at": self._first}

    @classmethod
    def from_form(cls, data: Mapping[str, Any], stored: ScheduleKind | None) -> DaysAt:
        every, first = (data.get("every") or "").strip(), data.get("run_at")
        if not every.endswith("d") or not every[:-1].isdigit():
            raise ValidationError({"every": "Give a whole number of days, e.g. 2d."})
        if first is None:
            raise ValidationError({"run_at": "Give the first run's date and time."})
        first = first.astimezone(UTC)
        return cls(days=int(every[:-1]), at=first.time(), since=first.date())

    def row(self) -> Row:
        return Row(
            "interval",
            {"every": self.days, "period": "days"},
            task_values={"start_time": self._first},
        )

    @classmethod
    def from_row(cls, task: Any) -> DaysAt | None:
        interval = task.interval
        if interval is None or interval.period != "days" or task.start_time is None:
            return None
        start = task.start_time.astimezone(UTC)
        return cls(days=interval.every, at=start.time(), since=start.date())


@contextmanager
def registered_days_at() -> Iterator[None]:
    register(DaysAt, first=True)
    try:
        yield
    finally:
        unregister(DaysAt)
