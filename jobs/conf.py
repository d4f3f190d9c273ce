"""The app's tuning knobs, read once from Django settings into a frozen, validated value."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


@dataclass(frozen=True)
class JobsConf:
    modules: tuple[str, ...]
    beat_max_interval: float

    def __post_init__(self) -> None:
        if self.beat_max_interval <= 0:
            raise ImproperlyConfigured("JOBS_BEAT_MAX_INTERVAL must be positive (seconds).")


@cache
def get_conf() -> JobsConf:
    return JobsConf(
        modules=tuple(settings.JOBS_MODULES),
        beat_max_interval=float(settings.JOBS_BEAT_MAX_INTERVAL),
    )
