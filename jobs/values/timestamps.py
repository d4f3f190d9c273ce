"""How an instant reads for people: ``2026-11-23 22:45:07 UTC``, with seconds (five runs of a
10 s job are five different times) and the zone (no one has to guess which clock).

``DATETIME_FORMAT`` is Django's format for every datetime the admin and its templates show
(``project/formats``); ``display`` is the same text where Python builds a string.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import formats, timezone

# Django date-format letters: ISO date, 24-hour time with seconds, the time zone's name.
DATETIME_FORMAT = "Y-m-d H:i:s T"


def display(value: datetime | None) -> str:
    """``value`` in the active time zone (``TIME_ZONE``), as every page shows it; ``-`` for none."""
    if value is None:
        return "-"
    return formats.date_format(timezone.localtime(value), DATETIME_FORMAT)
