"""Read the process environment once, validating each variable with a message that names it.

Settings import this module; nothing else reads ``os.environ`` for configuration.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Mapping
from typing import TypeVar

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_Number = TypeVar("_Number", int, float)


class Env:
    """A read-only view of the environment with typed, validated accessors."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = dict(os.environ if environ is None else environ)

    def str(self, name: builtins.str, default: builtins.str | None = None) -> builtins.str | None:
        value = self._environ.get(name)
        return default if value is None or value == "" else value

    def required(self, name: builtins.str, hint: builtins.str) -> builtins.str:
        value = self.str(name)
        if value is None:
            raise ImproperlyConfigured(f"{name} is not set: {hint}")
        return value

    def bool(self, name: builtins.str, default: builtins.bool) -> builtins.bool:
        raw = self._environ.get(name)
        if raw is None:
            return default
        lowered = raw.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean: use one of 1/0, true/false.")

    def int(
        self, name: builtins.str, default: builtins.int, *, minimum: builtins.int | None = None
    ) -> builtins.int:
        return self._number(name, default, int, "an integer", minimum)

    def float(
        self, name: builtins.str, default: builtins.float, *, minimum: builtins.float | None = None
    ) -> builtins.float:
        return self._number(name, default, float, "a number", minimum)

    def _number(
        self,
        name: builtins.str,
        default: _Number,
        parse: Callable[[builtins.str], _Number],
        kind: builtins.str,
        minimum: _Number | None,
    ) -> _Number:
        raw = self._environ.get(name)
        if raw is None or raw == "":
            return default
        try:
            value = parse(raw)
        except ValueError:
            raise ImproperlyConfigured(f"{name}={raw!r} is not {kind}.") from None
        if minimum is not None and value < minimum:
            raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}.")
        return value

    def list(
        self, name: builtins.str, default: builtins.list[builtins.str] | None = None
    ) -> builtins.list[builtins.str]:
        raw = self._environ.get(name)
        if raw is None:
            return list(default or [])
        return [item.strip() for item in raw.split(",") if item.strip()]
