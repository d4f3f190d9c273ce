"""What an audit entry records of a paused job (jobs.services.pause_state)."""

from __future__ import annotations

from typing import Any


def paused(by: str, reason: str = "", until: str | None = None) -> dict[str, Any]:
    return {"enabled": False, "paused_by": by, "pause_reason": reason, "paused_until": until}
