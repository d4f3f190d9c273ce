"""The day-one mistakes the jobs app's system checks name (jobs.checks)."""

from __future__ import annotations

import importlib.util

import pytest
from celery import current_app
from django.test import override_settings

from jobs import checks
from jobs.conf import get_alerts_conf
from tests.support.cached_settings import overriding


def test_a_beat_on_django_celery_beats_scheduler_is_named() -> None:
    with override_settings(CELERY_BEAT_SCHEDULER="django_celery_beat.schedulers:DatabaseScheduler"):
        (warning,) = checks.check_beat_scheduler()
    assert warning.id == "jobs.W001"
    assert "CELERY_BEAT_SCHEDULER" in warning.msg
    assert "jobs.beat.scheduler:ClusterScheduler" in str(warning.hint)


def test_our_scheduler_passes_by_either_spelling() -> None:
    for name in checks.OUR_SCHEDULERS:
        with override_settings(CELERY_BEAT_SCHEDULER=name):
            assert checks.check_beat_scheduler() == []


def test_half_the_pooler_options_is_named() -> None:
    assert checks.pooler_options_problems({"OPTIONS": {}}) == []
    both = {"OPTIONS": {"prepare_threshold": None}, "DISABLE_SERVER_SIDE_CURSORS": True}
    assert checks.pooler_options_problems(both) == []
    (warning,) = checks.pooler_options_problems({"OPTIONS": {"prepare_threshold": None}})
    assert warning.id == "jobs.W002"
    assert "DATABASE_POOLER=transaction" in str(warning.hint)
    (warning,) = checks.pooler_options_problems({"DISABLE_SERVER_SIDE_CURSORS": True})
    assert warning.id == "jobs.W002"


def test_alerts_without_a_public_url_are_named() -> None:
    with overriding(get_alerts_conf) as override:
        override(JOBS_ALERT_EMAILS=["ops@example.com"], JOBS_PUBLIC_URL="")
        (warning,) = checks.check_public_url()
        assert warning.id == "jobs.W003" and "JOBS_PUBLIC_URL" in warning.msg
        override(JOBS_PUBLIC_URL="https://jobs.example.com")
        assert checks.check_public_url() == []
        override(JOBS_ALERT_EMAILS=[], JOBS_PUBLIC_URL="")
        assert checks.check_public_url() == []  # no channel: nothing is sent, nothing to link


def test_a_database_other_than_postgresql_is_named_with_the_setting_to_change() -> None:
    sqlite = {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"}
    (error,) = checks.database_vendor_problems(sqlite)
    assert error.id == "jobs.E001" and "django.db.backends.sqlite3" in error.msg
    assert "DATABASES['default']['ENGINE']" in str(error.hint)
    assert checks.check_database_vendor() == []  # the suite's own: PostgreSQL


def test_no_broker_configured_is_an_error_naming_celerys_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A project whose Celery app is never made or never reads the settings would publish to
    Celery's default broker, where nothing answers."""
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    monkeypatch.setitem(current_app.conf, "broker_url", None)
    (error,) = checks.check_broker()
    assert error.id == "jobs.E002" and checks.CELERY_DEFAULT_BROKER in error.msg
    assert "CELERY_BROKER_URL" in str(error.hint) and "config_from_object" in str(error.hint)


def test_a_broker_without_its_client_is_an_error_naming_the_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = "redis://127.0.0.1:6379/0"
    monkeypatch.setitem(current_app.conf, "broker_url", url)
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    assert checks.check_broker() == []  # redis is installed here
    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "redis" else found(name, *a)
    )
    (error,) = checks.check_broker()
    assert error.id == "jobs.E003" and "'redis'" in error.msg and "celery[redis]" in str(error.hint)


def test_what_kombu_cannot_make_a_transport_for_is_named() -> None:
    assert checks.missing_broker_client("amqp://guest@127.0.0.1:5672//") is None
    assert "kombu has no transport for nosuch://" in str(
        checks.missing_broker_client("nosuch://somewhere")
    )
    assert checks.missing_broker_client("memory://") is None


def test_a_sentinel_broker_without_a_master_name_is_an_error_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = "sentinel://127.0.0.1:26379/0;sentinel://127.0.0.1:26380/0"
    monkeypatch.setitem(current_app.conf, "broker_url", url)
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)  # Celery reads it first
    monkeypatch.setitem(current_app.conf, "broker_transport_options", {"visibility_timeout": 9})
    (error,) = checks.check_broker()
    assert error.id == "jobs.E004" and "JOBS_BROKER_SENTINEL_MASTER" in str(error.hint)
    monkeypatch.setitem(current_app.conf, "broker_transport_options", {"master_name": "main"})
    assert checks.check_broker() == []
    # Other brokers need none.
    assert checks.sentinel_problems("redis://127.0.0.1:6379/0", {}) == []
    assert checks.sentinel_problems("SENTINEL://h:26379", None)[0].id == "jobs.E004"
