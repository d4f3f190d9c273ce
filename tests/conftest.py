"""Shared fixtures. Settings come from the environment that `make test` (devtools) prepares."""

from __future__ import annotations
