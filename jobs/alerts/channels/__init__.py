"""The channels an incident's notification is delivered on: a base (:mod:`.base`: what a channel
declares, and the registry) and one module per channel, each registering itself when imported:
a signed webhook POST (:mod:`.webhook`), an e-mail through Django's backend (:mod:`.email`).

Adding a channel is one module here (named in the import below) and its test; whatever lists the
channels (the model choices, the settings and their docs, the sender) reads the registry.
"""

from __future__ import annotations

# Registered as imported, the order of the choices and of the SQL's lists: webhook, then e-mail.
# isort: off
from jobs.alerts.channels import webhook
from jobs.alerts.channels import email

# isort: on
from jobs.alerts.channels.base import (
    DELIVERY_TIMEOUT,
    Channel,
    DeliveryFailed,
    Setting,
    declared_settings,
    register,
    registered,
    unregister,
)

__all__ = [
    "DELIVERY_TIMEOUT",
    "Channel",
    "DeliveryFailed",
    "Setting",
    "declared_settings",
    "email",
    "register",
    "registered",
    "unregister",
    "webhook",
]
