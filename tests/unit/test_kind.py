"""The registry of schedule kinds (``jobs.schedule.kind``): every built-in kind registered once,
rows read by the kinds in order, a kind registered twice refused. A kind added by a module of
its own is tested end to end in tests/integration/test_added_kind.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from jobs.schedule import kind
from jobs.schedule.kinds import At, Cron, Every, Solar
from tests.support.days_at import DaysAt, registered_days_at


def _entry(**rows: object) -> SimpleNamespace:
    fields = dict.fromkeys(("interval", "crontab", "clocked", "solar"))
    return SimpleNamespace(name="e", start_time=None, **{**fields, **rows})


def test_the_built_in_kinds_are_registered_once() -> None:
    assert kind.registered() == (Every, Cron, At, Solar)
    with pytest.raises(ValueError, match="already"):
        kind.register(Every)


def test_an_entry_without_a_schedule_row_is_refused() -> None:
    with pytest.raises(ValueError, match="has no schedule"):
        kind.from_row(_entry())


def test_a_kind_registered_first_reads_rows_before_the_others() -> None:
    interval = SimpleNamespace(every=2, period="days")
    with registered_days_at():
        assert kind.registered()[0] is DaysAt
        assert isinstance(kind.from_row(_entry(interval=interval)), Every)  # no start time
    assert DaysAt not in kind.registered()
    assert kind.from_row(_entry(interval=interval)) == Every(2 * 86400)
