"""The day-one mistakes the jobs app's system checks name (jobs.checks)."""

from __future__ import annotations

from django.test import override_settings

from jobs import checks


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
