"""Production settings: validated environment, and `check --deploy` clean."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _manage(env_overrides: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("DJANGO_") and key not in ("JOBS_MODULES",)
    }
    env.update(
        DATABASE_URL=os.environ.get("DATABASE_URL", "postgresql://u@localhost/db"),
        CELERY_BROKER_URL=os.environ.get("CELERY_BROKER_URL", "redis://localhost/0"),
        DJANGO_SETTINGS_MODULE="project.settings",
    )
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_check_deploy_is_clean_with_production_settings() -> None:
    result = _manage(
        {
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
            "DJANGO_ALLOWED_HOSTS": "jobs.example.com",
        },
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
    )
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_missing_secret_in_production_is_one_line_naming_the_variable() -> None:
    result = _manage({"DJANGO_DEBUG": "0", "DJANGO_ALLOWED_HOSTS": "x"}, "check")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "configuration error: DJANGO_SECRET_KEY is not set: set it to a long random string "
        "(or set DJANGO_DEBUG=1 for local development)."
    ]


def test_a_malformed_variable_is_named() -> None:
    result = _manage({"DJANGO_DEBUG": "perhaps"}, "check")
    assert result.returncode == 2
    assert "DJANGO_DEBUG='perhaps' is not a boolean" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_database_url_is_named() -> None:
    env = {"DJANGO_DEBUG": "1", "DATABASE_URL": ""}
    result = _manage(env, "check")
    assert result.returncode == 2
    assert "DATABASE_URL is not set" in result.stderr


def _production(**overrides: str) -> dict[str, str]:
    return {
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_ALLOWED_HOSTS": "jobs.example.com",
        **overrides,
    }


def _setting(env: dict[str, str], expression: str) -> str:
    """The value of ``expression`` (over ``settings``) in a process with ``env``."""
    result = _manage(
        env,
        "shell",
        "-c",
        f"from django.conf import settings; print(repr({expression}))",
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]  # after the shell's own banner, if any


def test_a_short_secret_in_production_is_one_line_naming_the_variable() -> None:
    short = "x" * 49
    result = _manage(_production(DJANGO_SECRET_KEY=short), "check")

    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "configuration error: DJANGO_SECRET_KEY is too short (49 characters): production needs "
        "at least 50"
    ), lines
    assert short not in result.stderr  # the error never echoes the key


def test_a_secret_of_50_characters_is_accepted_and_debug_allows_a_short_one() -> None:
    assert _manage(_production(DJANGO_SECRET_KEY="k" * 50), "check").returncode == 0
    debug = _manage({"DJANGO_DEBUG": "1", "DJANGO_SECRET_KEY": "short"}, "check")
    assert debug.returncode == 0, debug.stderr


def test_forwarded_proto_is_trusted_only_behind_a_declared_proxy() -> None:
    assert _setting(_production(), "settings.SECURE_PROXY_SSL_HEADER") == "None"
    behind = _production(DJANGO_BEHIND_PROXY="1")
    assert _setting(behind, "settings.SECURE_PROXY_SSL_HEADER") == (
        "('HTTP_X_FORWARDED_PROTO', 'https')"
    )
    bad = _manage(_production(DJANGO_BEHIND_PROXY="maybe"), "check")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "configuration error: DJANGO_BEHIND_PROXY='maybe' is not a boolean: use one of 1/0, "
        "true/false."
    ]


def test_check_deploy_is_clean_behind_a_proxy() -> None:
    result = _manage(
        _production(DJANGO_BEHIND_PROXY="1"), "check", "--deploy", "--fail-level", "WARNING"
    )
    assert result.returncode == 0, result.stderr


def test_a_transaction_pooler_turns_off_what_outlives_a_transaction() -> None:
    direct = _production()
    assert (
        _setting(
            direct,
            "settings.DATABASES['default'].get('OPTIONS', {}).get('prepare_threshold', 'unset')",
        )
        == "'unset'"
    )
    pooled = _production(DATABASE_POOLER="transaction")
    assert (
        _setting(pooled, "settings.DATABASES['default']['OPTIONS']['prepare_threshold']") == "None"
    )
    assert (
        _setting(pooled, "settings.DATABASES['default']['DISABLE_SERVER_SIDE_CURSORS']") == "True"
    )
    bad = _manage(_production(DATABASE_POOLER="statement"), "check")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "configuration error: DATABASE_POOLER='statement' is not a pooling mode: use none or "
        "transaction."
    ]


def _database(env: dict[str, str]) -> str:
    return _setting(
        env,
        "{k: settings.DATABASES['default'].get(k) for k in ('CONN_MAX_AGE', 'OPTIONS')}",
    )


def test_the_web_pool_bounds_its_connections_and_keeps_none_per_thread() -> None:
    # Without it (beats, workers, commands): a persistent connection per thread, as before.
    assert _database(_production()) == (
        "{'CONN_MAX_AGE': 60, 'OPTIONS': {'application_name': 'clusterjobs'}}"
    )
    pooled = _production(DATABASE_POOL_MAX_SIZE="4", DATABASE_POOL_TIMEOUT="2.5")
    assert _database(pooled) == (
        "{'CONN_MAX_AGE': 0, 'OPTIONS': {'pool': {'min_size': 1, 'max_size': 4, 'timeout': 2.5}, "
        "'application_name': 'clusterjobs web'}}"
    )
    assert (
        _setting(
            _production(DATABASE_POOL_MAX_SIZE="3"),
            "settings.DATABASES['default']['OPTIONS']['pool']['timeout']",
        )
        == "5.0"
    )
    # Django refuses a pool beside persistent connections; the check says it is consistent.
    assert _manage(pooled, "check").returncode == 0


def test_the_pool_goes_with_a_transaction_pooler_and_a_name_in_the_url_is_kept() -> None:
    url = os.environ.get("DATABASE_URL", "postgresql://u@localhost/db")
    named = f"{url}{'&' if '?' in url else '?'}application_name=mine"
    env = _production(DATABASE_URL=named, DATABASE_POOLER="transaction", DATABASE_POOL_MAX_SIZE="2")
    assert _database(env) == (
        "{'CONN_MAX_AGE': 0, 'OPTIONS': {'application_name': 'mine', 'prepare_threshold': None, "
        "'pool': {'min_size': 1, 'max_size': 2, 'timeout': 5.0}}}"
    )


def test_a_bad_pool_size_or_timeout_is_named() -> None:
    for variable, value, message in (
        ("DATABASE_POOL_MAX_SIZE", "-1", "DATABASE_POOL_MAX_SIZE=-1 must be at least 0."),
        ("DATABASE_POOL_MAX_SIZE", "many", "DATABASE_POOL_MAX_SIZE='many' is not an integer."),
        ("DATABASE_POOL_TIMEOUT", "0", "DATABASE_POOL_TIMEOUT=0.0 must be at least 0.1."),
    ):
        result = _manage(_production(**{"DATABASE_POOL_MAX_SIZE": "2", variable: value}), "check")
        assert result.returncode == 2
        assert result.stderr.strip().splitlines() == [f"configuration error: {message}"]


def test_the_sentinel_master_and_password_go_to_the_transport_options() -> None:
    options = "sorted(settings.CELERY_BROKER_TRANSPORT_OPTIONS.items())"
    env = _production(
        CELERY_BROKER_URL="sentinel://127.0.0.1:26379/0;sentinel://127.0.0.1:26380/0",
        JOBS_BROKER_SENTINEL_MASTER="primary",
        JOBS_BROKER_SENTINEL_PASSWORD="sentinels-only",
    )
    shown = _setting(env, options)
    assert "('master_name', 'primary')" in shown
    assert "('sentinel_kwargs', {'password': 'sentinels-only'})" in shown
    # Unset: kombu's defaults, nothing added.
    plain = _setting(_production(), options)
    assert "master_name" not in plain and "sentinel_kwargs" not in plain
