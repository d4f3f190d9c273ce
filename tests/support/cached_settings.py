"""Settings a test overrides although the code reads them once and caches what it read."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from django.test import override_settings


class Cached(Protocol):
    def cache_clear(self) -> None: ...


@contextlib.contextmanager
def overriding(cached: Cached) -> Iterator[Callable[..., None]]:
    """A function that overrides settings (``override(NAME=value, ...)``) until the block ends;
    ``cached`` (a ``functools.cache``'d reader of them) is cleared at each change."""
    overrides: list[override_settings] = []

    def override(**values: Any) -> None:
        change = override_settings(**values)
        change.enable()
        overrides.append(change)
        cached.cache_clear()

    yield override
    for change in overrides:
        change.disable()
    cached.cache_clear()
