"""How an instant reads for people (jobs.values.timestamps): seconds and the zone, in the active
time zone, and ``-`` for none."""

from __future__ import annotations

from datetime import UTC, datetime

from django.test import override_settings
from django.utils import timezone

from jobs.values.timestamps import display


def test_an_instant_shows_its_seconds_and_its_zone() -> None:
    with timezone.override("UTC"):
        assert display(datetime(2026, 11, 23, 22, 45, 7, 999, tzinfo=UTC)) == (
            "2026-11-23 22:45:07 UTC"
        )


@override_settings(USE_TZ=True)
def test_it_reads_in_the_active_time_zone() -> None:
    with timezone.override("Europe/Paris"):
        assert display(datetime(2026, 7, 1, 12, 0, tzinfo=UTC)) == "2026-07-01 14:00:00 CEST"


def test_no_instant_is_a_dash() -> None:
    assert display(None) == "-"
