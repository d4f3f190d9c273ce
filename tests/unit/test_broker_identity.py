"""Which broker a process talks to, without its credentials (jobs.broker.broker_identity)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from jobs.broker import broker_identity
from jobs.broker.broker_identity import redacted


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@cache.internal:6379/2", "redis://cache.internal:6379/2"),
        ("amqp://user:pass@rabbit/vhost?heartbeat=30", "amqp://rabbit/vhost"),
        ("redis://localhost", "redis://localhost/"),
        ("amqp://u:p@first:5672//; amqp://u:p@second:5672//", "amqp://first:5672//"),
        ("redis://host:notaport/0", ""),
    ],
)
def test_a_broker_url_keeps_transport_host_port_and_path_only(url: str, shown: str) -> None:
    assert redacted(url) == shown


def test_a_long_url_is_cut_to_the_column() -> None:
    assert len(redacted("redis://" + "h" * 300 + "/0")) == 255


def test_this_process_reports_its_apps_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    app = SimpleNamespace(conf=SimpleNamespace(broker_url="redis://:pw@broker-a:6379/5"))
    monkeypatch.setattr(broker_identity, "current_app", app)
    assert broker_identity.current() == "redis://broker-a:6379/5"
    app.conf.broker_url = None  # unset: the setting's
    monkeypatch.setattr(broker_identity.settings, "CELERY_BROKER_URL", "amqp://u:p@rabbit//")
    assert broker_identity.current() == "amqp://rabbit//"
    app.conf = SimpleNamespace()  # no broker_url at all: unknown, never an error
    assert broker_identity.current() == ""


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "sentinel://:pw@s2:26379/0;sentinel://:pw@s1:26379/0; sentinel://:pw@s3:26380/0",
            "sentinel://s1:26379,s2:26379,s3:26380/0?master_name=primary",
        ),
        # The same sentinels in another order: the same broker.
        (
            "sentinel://s3:26380/0;sentinel://s1:26379/0;sentinel://s2:26379/0",
            "sentinel://s1:26379,s2:26379,s3:26380/0?master_name=primary",
        ),
        ("sentinel://s1", "sentinel://s1/?master_name=primary"),
    ],
)
def test_a_sentinel_url_names_every_sentinel_and_the_master(url: str, shown: str) -> None:
    assert redacted(url, "primary") == shown


def test_two_masters_behind_the_same_sentinels_are_two_brokers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = "sentinel://:pw@s1:26379/0;sentinel://s2:26379/0"
    app = SimpleNamespace(
        conf=SimpleNamespace(broker_url=url, broker_transport_options={"master_name": "a"})
    )
    monkeypatch.setattr(broker_identity, "current_app", app)
    first = broker_identity.current()
    app.conf.broker_transport_options = {"master_name": "b", "visibility_timeout": 10}
    assert first == "sentinel://s1:26379,s2:26379/0?master_name=a"
    assert broker_identity.current() == "sentinel://s1:26379,s2:26379/0?master_name=b"
    app.conf.broker_transport_options = None  # no master name: still no error
    assert broker_identity.current() == "sentinel://s1:26379,s2:26379/0?master_name="
