"""What Celery shows of its configuration carries no password (project/redaction.py); the real
worker's replies are tested in tests/acceptance/test_config_secrets.py."""

from __future__ import annotations

import celery.app.utils
from celery import Celery

from project import redaction
from project.redaction import MASK, redact


def test_every_urls_password_is_masked_whatever_the_setting_is_called() -> None:
    assert redact("redis://:pw@h:6379/0") == f"redis://:{MASK}@h:6379/0"
    assert redact("amqp://user:pw@h:5672/vhost") == f"amqp://user:{MASK}@h:5672/vhost"
    assert redact("sentinel://:a@h1:26379;sentinel://:b@h2:26379") == (
        f"sentinel://:{MASK}@h1:26379;sentinel://:{MASK}@h2:26379"
    )
    # Nothing to mask: no password, or no URL.
    for plain in ("redis://h:6379/0", "amqp://user@h//", "a:b@c", "Europe/Paris"):
        assert redact(plain) == plain


def test_mappings_lists_and_tuples_are_walked_and_credential_names_hidden_whole() -> None:
    conf = {
        "CELERY_BROKER_URL": "redis://:pw@h/0",
        "CELERY_BROKER_TRANSPORT_OPTIONS": {"sentinels": [("redis://:pw@s", 1)]},
        "FLOWER_BASIC_AUTH": "admin:pw",
        "JOBS_ALERT_WEBHOOK_URL": "https://hooks.example.com/T0/B0/token",
        "SENTRY_DSN": "https://key@o0.ingest.example.com/1",
        "TIME_ZONE": "UTC",
        "JOBS_NODE_HEARTBEAT": 5.0,
    }

    shown = redact(conf)

    assert "pw" not in repr(shown) and "token" not in repr(shown) and "key@" not in repr(shown)
    assert shown["CELERY_BROKER_TRANSPORT_OPTIONS"] == {"sentinels": [(f"redis://:{MASK}@s", 1)]}
    assert shown["FLOWER_BASIC_AUTH"] == MASK
    assert (shown["TIME_ZONE"], shown["JOBS_NODE_HEARTBEAT"]) == ("UTC", 5.0)


class DjangoLikeSettings:
    """Settings read with ``namespace="CELERY"``, as project/celery.py reads Django's."""

    CELERY_BROKER_URL = "redis://:broker-pw@127.0.0.1:6379/0"
    CELERY_RESULT_BACKEND = "db+postgresql://u:backend-pw@db/results"
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "jobs-db-name",
            "USER": "jobs-db-user",
            "PASSWORD": "db-pw",
            "HOST": "db-host.internal",
            "PORT": 5433,
        }
    }
    SECRET_KEY = "secret-key-value"
    CELERY_TASK_ACKS_LATE = True


def test_celerys_own_tables_use_both_rule_sets() -> None:
    redaction.install()
    assert celery.app.utils.filter_hidden_settings is redaction.filter_hidden_settings
    app = Celery("redaction-test", set_as_current=False)
    app.config_from_object(DjangoLikeSettings, namespace="CELERY")

    for table in (app.conf.table(), app.conf.table(with_defaults=True)):
        assert table["CELERY_BROKER_URL"] == f"redis://:{MASK}@127.0.0.1:6379/0"
        assert table["CELERY_TASK_ACKS_LATE"] is True
    report = app.conf.humanize()
    assert f"CELERY_BROKER_URL: 'redis://:{MASK}@127.0.0.1:6379/0'" in report
    for secret in ("broker-pw", "backend-pw", "db-pw", "secret-key-value"):
        assert secret not in repr(app.conf.table()) and secret not in report


def test_the_database_settings_are_hidden_whole() -> None:
    # Celery hides a name like DATABASE only when its value is no mapping: DATABASES itself it
    # walks, masking the password alone and showing where the database is and who logs in.
    redaction.install()
    app = Celery("redaction-test", set_as_current=False)
    app.config_from_object(DjangoLikeSettings, namespace="CELERY")

    assert app.conf.table()["DATABASES"] == MASK
    report = app.conf.humanize()
    details = ("jobs-db-name", "jobs-db-user", "db-host.internal", "5433", "django.db.backends")
    for detail in details:
        assert detail not in repr(app.conf.table()) and detail not in report
