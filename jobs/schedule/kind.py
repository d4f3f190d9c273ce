"""A schedule kind: the base every kind of schedule implements, and the registry of kinds.

A kind is a frozen value class that carries everything about itself, as django-celery-beat's
schedule models and db-scheduler's ``Schedule`` classes do: its slots (``latest_slot``,
``next_slot``), its words (``describe``), and its mapping to and from django-celery-beat's rows
(``row``, ``from_row``). The rest of the app asks the value, never which kind it is.

Adding a kind is one module: a subclass, then ``register(TheKind)`` once, at import. Example::

    @dataclass(frozen=True)
    class Daily(ScheduleKind):
        at: time
        def latest_slot(self, now): ...
        def next_slot(self, now): ...
        def describe(self): return f"daily at {self.at:%H:%M} (UTC)"
        def row(self): return Row("crontab", {...})
        @classmethod
        def from_row(cls, task): ...

    register(Daily)

docs/architecture.md, "Adding a schedule kind", says what each method must keep.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar


@dataclass(frozen=True)
class SlotWindow:
    """The slots in a window, newest ones listed, older ones (beyond a limit) only summarised."""

    slots: list[datetime]  # ascending; at most ``limit`` of them, the newest
    omitted: int  # how many older slots are not listed (0: the list is complete)
    omitted_first: datetime | None  # the oldest slot not listed
    omitted_count_exact: bool  # False when ``omitted`` only says "at least this many"


@dataclass(frozen=True)
class Row:
    """The django-celery-beat row that carries a schedule: the ``PeriodicTask``'s foreign key
    ``field`` (``interval``, ``crontab``, ``clocked`` or ``solar``) set to a row with ``values``
    (shared rows are looked up or created; others are created for this entry alone), and the
    entry's own columns ``task_values`` (e.g. ``start_time``, ``one_off``)."""

    field: str
    values: Mapping[str, Any]
    shared: bool = True
    task_values: Mapping[str, Any] = dataclasses.field(default_factory=dict)


class ScheduleKind:
    """The base of every schedule value. Subclasses are frozen dataclasses."""

    # A single slot, owed whenever the job was edited (a one-off): the beat takes it even when
    # it came before the job's last edit.
    once: ClassVar[bool] = False
    # Its slots' phase is its own (an anchored interval), where Celery's counts from the last
    # run: the switch report (jobs.beat.switch_report) does not hold its next slots to Celery's.
    phase_of_its_own: ClassVar[bool] = False
    # The admin form (jobs.forms): the schedule type's value and label, the form fields the kind
    # reads, and whether a new job may choose it (False: only kept on a job whose entry has it).
    form_choice: ClassVar[str]
    form_label: ClassVar[str]
    form_fields: ClassVar[tuple[str, ...]] = ()
    offered_when_new: ClassVar[bool] = True
    # ``jobs add``'s option (and the API's field, by the same name) that gives this kind, if
    # any, and whether ``tz`` goes with it (jobs.services.schedule_from).
    option: ClassVar[str | None] = None
    option_takes_tz: ClassVar[bool] = False

    def latest_slot(self, now: datetime) -> datetime | None:
        """The newest slot at or before ``now`` (UTC), or ``None`` if the schedule has not
        begun."""
        raise NotImplementedError

    def next_slot(self, now: datetime) -> datetime | None:
        """The first slot strictly after ``now`` (UTC), or ``None`` if there will be none."""
        raise NotImplementedError

    def window(self, after: datetime, until: datetime, limit: int) -> SlotWindow | None:
        """The slots of ``after < s <= until`` when the kind can count them faster than a walk
        from slot to slot (``jobs.schedule.slots.slots_in``); ``None``: walk."""
        return None

    @property
    def time_zone(self) -> str | None:
        """The zone the schedule is read in, if it names one."""
        return None

    def wall_times(self, start: datetime, end: datetime) -> list[datetime] | None:
        """The wall-clock times ``start <= w < end`` (naive, in ``time_zone``) a kind that
        matches wall clocks matches, so a preview can say which of them a DST change moves or
        repeats (``jobs.schedule.dst``); ``None`` for a kind whose slots are not wall times."""
        return None

    def describe(self) -> str:
        """The schedule in words, for the admin and the CLI."""
        raise NotImplementedError

    def form_initial(self) -> dict[str, Any]:
        """The values of ``form_fields`` that show this schedule on the form."""
        return {}

    @classmethod
    def from_form(cls, data: Mapping[str, Any], stored: ScheduleKind | None) -> ScheduleKind:
        """This kind's schedule from the form's cleaned ``data`` (only ``form_fields`` read);
        ``stored`` is the job's current schedule. Raises Django's ``ValidationError`` keyed by
        the form field at fault."""
        raise NotImplementedError

    @classmethod
    def from_option(cls, value: Any, tz: str | None) -> ScheduleKind:
        """This kind's schedule from its option's ``value``, parsed (e.g. a datetime) or as
        typed (JSON), with ``tz`` if it takes one. ``TypeError`` or ``ValueError`` become a
        message on the option."""
        raise NotImplementedError

    def row(self) -> Row:
        """The django-celery-beat row that carries this schedule (``jobs.beat.entries``)."""
        raise NotImplementedError

    @classmethod
    def from_row(cls, task: Any) -> ScheduleKind | None:
        """This kind's schedule carried by the ``PeriodicTask`` ``task`` (its schedule rows
        loaded), ``None`` if the entry carries another kind, or ``ValueError`` if it carries
        this kind with values that are no schedule."""
        raise NotImplementedError


_KINDS: list[type[ScheduleKind]] = []


def register(kind: type[ScheduleKind], *, first: bool = False) -> None:
    """Make ``kind`` one of the schedule kinds. Rows are read by the kinds in order (``first``:
    before those registered), so a kind that reads a narrower set of rows than another goes
    first."""
    if kind in _KINDS:
        raise ValueError(f"{kind.__name__} is already a registered schedule kind")
    _KINDS.insert(0, kind) if first else _KINDS.append(kind)


def unregister(kind: type[ScheduleKind]) -> None:
    """Forget ``kind`` (tests that register a kind of their own)."""
    _KINDS.remove(kind)


def registered() -> tuple[type[ScheduleKind], ...]:
    """The registered kinds, in the order they read rows."""
    return tuple(_KINDS)


def from_row(task: Any) -> ScheduleKind:
    """The schedule a ``PeriodicTask`` carries, read by the first kind that recognises it."""
    for kind in _KINDS:
        schedule = kind.from_row(task)
        if schedule is not None:
            return schedule
    raise ValueError(f"beat entry {task.name!r} has no schedule")
