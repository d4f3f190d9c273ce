"""The day-one mistakes the jobs app's system checks name (jobs.checks)."""

from __future__ import annotations

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
