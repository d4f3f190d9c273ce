"""jobs.guard.token_watch: a token no higher than one this process held stops the process."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.database import pooler_hint
from jobs.guard import token_watch


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []

    def record(database: dict[str, Any], cause: str, message: str) -> None:
        problems.append((cause, message))

    monkeypatch.setattr(pooler_hint, "record_problem", record)
    monkeypatch.setattr(
        token_watch, "connection", type("C", (), {"vendor": "postgresql", "settings_dict": {}})
    )
    return problems


def test_growing_tokens_are_fine_on_every_key(recorded: list[tuple[str, str]]) -> None:
    assert token_watch.observe("job:a", 1) is None
    assert token_watch.observe("job:b", 1) is None
    assert token_watch.observe("job:a", 2) is None
    assert token_watch.observe("job:a", 7) is None
    assert token_watch.halted() is None
    assert recorded == []


@pytest.mark.parametrize("again", [5, 3])
def test_a_token_held_before_or_lower_halts_the_process_for_good(
    recorded: list[tuple[str, str]], caplog: pytest.LogCaptureFixture, again: int
) -> None:
    token_watch.observe("job:a", 4)
    token_watch.observe("job:a", 5)
    reason = token_watch.observe("job:a", again)
    assert reason == f"lease job:a was handed token {again} after this process had held token 5"
    # Every later run is refused, whatever its key and token; said once, recorded once a minute.
    assert token_watch.observe("job:b", 100) == reason
    assert token_watch.halted() == reason
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        f"{token_watch.ADVICE}: {reason}"
    ]
    assert recorded == [(token_watch.CAUSE, f"{token_watch.ADVICE} ({reason})")]
