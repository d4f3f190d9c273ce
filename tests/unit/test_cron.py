"""Cron slots in a time zone, called directly (``jobs.schedule.cron``): the DST rule and the
repeated hour. The full properties, against a minute-by-minute enumeration and Celery's crontab,
are in test_slots.py and test_crontab_meaning.py, through the ``Cron`` kind."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jobs.schedule.cron import cron_latest, cron_next


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_a_time_in_the_dst_gap_runs_at_the_end_of_the_gap() -> None:
    # Paris, 2026-03-29: 02:30 does not exist; 02:00 CET became 03:00 CEST at 01:00 UTC.
    assert cron_next("30 2 * * *", "Europe/Paris", _utc("2026-03-28T12:00")) == _utc(
        "2026-03-29T01:00"
    )


def test_a_repeated_time_runs_at_its_first_pass() -> None:
    # Paris, 2026-10-25: 02:30 is at 00:30 and 01:30 UTC; 01:45 UTC is in the second pass.
    assert cron_latest("30 2 * * *", "Europe/Paris", _utc("2026-10-25T01:45")) == _utc(
        "2026-10-25T00:30"
    )
    assert cron_next("30 2 * * *", "Europe/Paris", _utc("2026-10-25T00:30")) == _utc(
        "2026-10-26T01:30"
    )


def test_an_expression_that_never_fires_raises() -> None:
    with pytest.raises(ValueError, match="never fires"):
        cron_next("0 0 30 2 *", "UTC", _utc("2026-01-01T00:00"))
