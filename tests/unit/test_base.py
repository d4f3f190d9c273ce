"""The channels' registry (jobs.alerts.channels.base): each channel registers itself, and what
lists the channels is built from the registry (the model choices, the settings' docs) or, for
the SQL that cannot read it, held to it here."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.db import models

from devtools.docs_reference import configuration_reference
from jobs.alerts.channels import (
    Channel,
    Setting,
    declared_settings,
    register,
    registered,
    unregister,
)
from jobs.alerts.channels.email import EmailChannel
from jobs.alerts.channels.webhook import WebhookChannel
from jobs.alerts.notification import Notification
from jobs.models import AlertDelivery, Job

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ["webhook", "email"]


@dataclass(frozen=True)
class PagerChannel(Channel):
    """A channel of the suite's own, registered by the fixture below only."""

    name = "pager"
    label = "pager only"
    settings = (Setting("JOBS_ALERT_PAGER_URL", "", "where pages go"),)

    url: str

    @classmethod
    def from_settings(cls, values: Mapping[str, Any]) -> PagerChannel:
        return cls(url=str(values["JOBS_ALERT_PAGER_URL"]))

    @property
    def configured(self) -> bool:
        return bool(self.url)

    def send(self, notification: Notification) -> None:
        raise AssertionError("not sent in these tests")


@pytest.fixture
def pager() -> Iterator[type[PagerChannel]]:
    register(PagerChannel)
    yield PagerChannel
    unregister(PagerChannel.name)


def test_each_channel_is_registered_by_its_module() -> None:
    assert {"webhook": WebhookChannel, "email": EmailChannel} == dict(registered())


def _choices(model: type[models.Model], name: str) -> list[tuple[str, str]]:
    field = model._meta.get_field(name)
    assert isinstance(field, models.Field)
    return list(field.flatchoices)


def test_a_channel_registered_is_in_the_model_choices_without_a_migration(
    pager: type[PagerChannel],
) -> None:
    job_choices = _choices(Job, "alert_channels")
    assert [value for value, _ in job_choices] == ["default", *SHIPPED, "pager", "none"]
    assert ("pager", "pager only") in job_choices
    delivery_choices = _choices(AlertDelivery, "channel")
    assert [value for value, _ in delivery_choices] == [*SHIPPED, "pager"]


def test_the_model_choices_are_the_registry_s() -> None:
    job_choices = _choices(Job, "alert_channels")
    assert [value for value, _ in job_choices] == ["default", *SHIPPED, "none"]
    assert [value for value, _ in _choices(AlertDelivery, "channel")] == SHIPPED


def test_the_sql_lists_every_shipped_channel_where_it_lists_them() -> None:
    # jobs_alert_channels() cannot read the registry: its lists of every channel (a cluster
    # incident's, a job's "default") are held to it here.
    sql = (ROOT / "jobs" / "sql" / "alerts.sql").read_text()
    function = sql[sql.index("FUNCTION jobs_alert_channels") :]
    function = function[: function.index("$$;")]
    lists = re.findall(r"ARRAY\[('[^\]]*)\]", function)
    assert len(lists) == 2
    for listed in lists:
        assert re.findall(r"'(\w+)'", listed) == list(registered())


def test_each_channel_setting_is_in_the_configuration_reference() -> None:
    page = configuration_reference()
    for setting in declared_settings().values():
        assert f"| `{setting.name}` | {setting.meaning}" in page


def test_a_name_that_cannot_be_a_channel_s_is_refused() -> None:
    for name in ("default", "none", "two words", "x" * 17):
        bad = type("Bad", (PagerChannel,), {"name": name})
        with pytest.raises(ValueError, match="cannot name a channel"):
            register(bad)
    with pytest.raises(ValueError, match="registered already"):
        register(type("Webhook", (PagerChannel,), {"name": "webhook"}))
    assert "pager" not in registered()


def test_a_channel_not_configured_says_which_setting_to_set() -> None:
    assert PagerChannel(url="").not_configured == "JOBS_ALERT_PAGER_URL is not set"
