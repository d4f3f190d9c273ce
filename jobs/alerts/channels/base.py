"""What a channel is, and the registry of them.

A channel is one module of this package holding one :class:`Channel` subclass, decorated with
:func:`register`. The class says everything the rest of the app needs to know about it:

- ``name``: the value of an outbox row's ``channel`` and of a job's ``alert_channels`` (the model
  choices, the API's and the CLI's are built from the registry);
- ``label``: how a job's choice of it alone reads;
- ``settings``: the Django settings it reads, each with its default and meaning (the docs'
  configuration reference is built from them);
- ``from_settings``: builds it from their values, refusing a bad one with ``ImproperlyConfigured``
  naming its setting (called once, when the app starts);
- ``configured``: whether it delivers; the notifications of a channel that does not are dropped,
  saying ``not_configured``;
- ``send``: delivers one notification within ``DELIVERY_TIMEOUT``, with its idempotency key, or
  raises :class:`DeliveryFailed` saying why (it is retried).

For example::

    @register
    @dataclass(frozen=True)
    class PagerChannel(Channel):
        name = "pager"
        label = "pager only"
        settings = (Setting("JOBS_ALERT_PAGER_URL", "", "where pages are posted"),)
        url: str

        @classmethod
        def from_settings(cls, values: Mapping[str, Any]) -> PagerChannel:
            return cls(url=str(values["JOBS_ALERT_PAGER_URL"]))

        @property
        def configured(self) -> bool:
            return bool(self.url)

        def send(self, notification: Notification) -> None: ...

The one list the registry cannot reach is ``jobs/sql/alerts.sql``'s channels of the ``default``
choice (SQL, frozen in migrations): ``tests/unit/test_base.py`` holds it to the registry.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

if TYPE_CHECKING:
    from jobs.alerts.notification import Notification

# Seconds a delivery may take at most, connecting and each read: the sender hides a row it took
# for longer than this, so a slow receiver delays only the alerts behind it.
DELIVERY_TIMEOUT = 10.0
# Every channel sends it, the same for every attempt of one notification, so a receiver told
# twice (the outbox delivers at least once) can tell.
IDEMPOTENCY_HEADER = "Idempotency-Key"
# The width of the outbox's and the job's channel columns.
MAX_NAME_LENGTH = 16


class DeliveryFailed(Exception):
    """The receiver did not take the notification; it will be retried."""


@dataclass(frozen=True)
class Setting:
    """A Django setting a channel reads, with the default the app assumes when a project sets
    nothing, and what it means (a cell of the docs' configuration reference)."""

    name: str
    default: object
    meaning: str
    # What the default means, when the value alone does not say it ("refused").
    remark: str = ""


class Channel(ABC):
    """One way an incident's notification is delivered (see the module's docstring)."""

    name: ClassVar[str]
    label: ClassVar[str]
    settings: ClassVar[tuple[Setting, ...]] = ()

    @classmethod
    @abstractmethod
    def from_settings(cls, values: Mapping[str, Any]) -> Channel:
        """The channel as ``values`` (each of ``settings`` by name) configure it."""

    @property
    @abstractmethod
    def configured(self) -> bool:
        """Whether it delivers: the notifications of one that does not are dropped."""

    @property
    def not_configured(self) -> str:
        """Why its notifications are dropped, recorded on their rows."""
        return f"{self.settings[0].name} is not set" if self.settings else "not configured"

    @abstractmethod
    def send(self, notification: Notification) -> None:
        """Deliver ``notification`` within ``DELIVERY_TIMEOUT``, else raise ``DeliveryFailed``."""


_REGISTRY: dict[str, type[Channel]] = {}
C = TypeVar("C", bound=type[Channel])


def register(channel: C) -> C:
    """Add ``channel`` to the channels (a class decorator)."""
    name = channel.name
    if not name.isidentifier() or len(name) > MAX_NAME_LENGTH or name in ("default", "none"):
        raise ValueError(f"{name!r} cannot name a channel: an identifier of at most 16 characters")
    if name in _REGISTRY and _REGISTRY[name] is not channel:
        raise ValueError(f"a channel named {name!r} is registered already")
    _REGISTRY[name] = channel
    return channel


def unregister(name: str) -> None:
    """Remove the channel ``name`` (the suite's own channels, once their test ends)."""
    del _REGISTRY[name]


def registered() -> Mapping[str, type[Channel]]:
    """The channels by name, in the order they were registered."""
    return MappingProxyType(_REGISTRY)


def declared_settings() -> dict[str, Setting]:
    """Every setting a channel reads, by name (two channels may share one)."""
    return {setting.name: setting for channel in _REGISTRY.values() for setting in channel.settings}
