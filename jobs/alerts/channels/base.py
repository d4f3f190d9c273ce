"""What every channel shares: how a delivery says it failed."""

from __future__ import annotations


class DeliveryFailed(Exception):
    """The receiver did not take the notification; it will be retried."""
