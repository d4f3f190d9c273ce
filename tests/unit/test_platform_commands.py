"""What ``make run`` starts (devtools): only the web shares a connection pool."""

from __future__ import annotations

from devtools.__main__ import WEB_POOL_DEFAULT, platform_commands


def test_only_the_web_gets_a_pool_and_its_size_can_be_chosen() -> None:
    commands = {c.name: c for c in platform_commands({}, "8000", "5555")}
    assert sorted(commands) == ["beat-1", "beat-2", "flower", "web", "worker-1", "worker-2"]
    assert commands["web"].env == {"DATABASE_POOL_MAX_SIZE": str(WEB_POOL_DEFAULT)}
    assert "runserver" in commands["web"].argv
    assert all(not c.env for name, c in commands.items() if name != "web")
    chosen = platform_commands({"WEB_DATABASE_POOL_MAX_SIZE": "3"}, "8000", "5555")
    assert chosen[0].env == {"DATABASE_POOL_MAX_SIZE": "3"}
