"""Slots of a solar schedule: the instant of its event (sunrise, sunset, ...) on each day, the
same events, horizons and disc rules as ``celery.schedules.solar`` (computed with ``ephem``).

Slot identity needs every beat to compute the very same instant. ``ephem`` finds an event by
iterating from a start time, so two starts a few seconds apart may give instants a few
microseconds apart: each day's event is therefore always searched from the same start, that
day's local mean midnight (UTC shifted by the longitude), and rounded to the second. A day on
which the event does not happen (polar day or night) has no slot.
"""

from __future__ import annotations

import importlib
import math
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobs.schedule.kinds import Solar

# Untyped on purpose: ephem's bundled hints name only part of its C extension (Sun, Date, errors).
ephem: Any = importlib.import_module("ephem")

# As celery.schedules.solar.
_HORIZONS = {
    "dawn_astronomical": "-18", "dawn_nautical": "-12", "dawn_civil": "-6",
    "sunrise": "-0:34", "solar_noon": "0", "sunset": "-0:34",
    "dusk_civil": "-6", "dusk_nautical": "-12", "dusk_astronomical": "-18",
}  # fmt: skip
_METHODS = {
    "dawn_astronomical": "next_rising", "dawn_nautical": "next_rising",
    "dawn_civil": "next_rising", "sunrise": "next_rising", "solar_noon": "next_transit",
    "sunset": "next_setting", "dusk_civil": "next_setting", "dusk_nautical": "next_setting",
    "dusk_astronomical": "next_setting",
}  # fmt: skip
_USE_CENTER = {"dawn_astronomical", "dawn_nautical", "dawn_civil"} | {
    "dusk_civil", "dusk_nautical", "dusk_astronomical",
}  # fmt: skip
# The longest a solar event goes without happening (a polar night at the pole).
MAX_SEARCH_DAYS = 366
_DAY = timedelta(days=1)


def latest(schedule: Solar, now: datetime) -> datetime | None:
    """The newest slot at or before ``now``."""
    day = _local_day(schedule, now)
    for back in range(MAX_SEARCH_DAYS + 1):
        slot = _slot_of_day(schedule, day - _DAY * back)
        if slot is not None and slot <= now:
            return slot
    return None


def following(schedule: Solar, now: datetime) -> datetime | None:
    """The first slot strictly after ``now``."""
    day = _local_day(schedule, now)
    for ahead in range(-1, MAX_SEARCH_DAYS + 1):
        slot = _slot_of_day(schedule, day + _DAY * ahead)
        if slot is not None and slot > now:
            return slot
    return None


def _local_day(schedule: Solar, instant: datetime) -> datetime:
    """The local mean midnight (as a UTC instant) that starts the day ``instant`` falls in."""
    offset = timedelta(hours=schedule.longitude / 15)
    local = instant.astimezone(UTC) + offset
    return datetime(local.year, local.month, local.day, tzinfo=UTC) - offset


@lru_cache(maxsize=8192)
def _slot_of_day(schedule: Solar, midnight: datetime) -> datetime | None:
    """The event's instant in the local day starting at ``midnight``, to the second; ``None``
    when it does not happen that day."""
    observer = ephem.Observer()
    observer.lat, observer.lon = str(schedule.latitude), str(schedule.longitude)
    # As celery: sea level, no refraction (the -0:34 horizon of sunrise and sunset stands for it).
    observer.elev, observer.pressure = 0, 0
    observer.horizon = _HORIZONS[schedule.event]
    observer.date = ephem.Date(midnight.replace(tzinfo=None))
    method = getattr(observer, _METHODS[schedule.event])
    try:
        if schedule.event in _USE_CENTER:
            found = method(ephem.Sun(), use_center=True)
        else:
            found = method(ephem.Sun())
    except (ephem.AlwaysUpError, ephem.NeverUpError):
        return None
    event = found.datetime().replace(tzinfo=UTC)
    slot = datetime.fromtimestamp(math.floor(event.timestamp() + 0.5), tz=UTC)
    return slot if slot < midnight + _DAY else None
