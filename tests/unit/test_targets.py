"""Where a webhook may be posted (jobs/alerts/targets.py): public addresses only, checked on the
configured host and again on each address a name resolves to. The senders' own refusals (a name
resolving inside, a redirect) are in test_webhook.py; the setting's in test_conf.py."""

from __future__ import annotations

import socket
from ipaddress import ip_address
from typing import Any

import pytest

from jobs.alerts.targets import (
    TargetRefused,
    configured_host_problem,
    connect_public,
    non_public_kind,
)


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped: reaches 127.0.0.1
        ("169.254.169.254", "link-local"),  # a cloud's metadata service
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("10.0.0.1", "private"),
        ("192.168.1.1", "private"),
        ("172.16.0.1", "private"),
        ("100.64.0.1", "non-public"),  # shared address space (carrier-grade NAT)
        ("93.184.216.34", None),
        ("2606:4700::1111", None),
    ],
)
def test_each_address_is_named_by_its_kind_or_public(address: str, kind: str | None) -> None:
    assert non_public_kind(ip_address(address)) == kind


@pytest.mark.parametrize(
    ("host", "problem"),
    [
        ("localhost", "localhost is a loopback name"),
        ("LOCALHOST.", "LOCALHOST. is a loopback name"),
        ("api.localhost", "api.localhost is a loopback name"),
        ("127.0.0.1", "127.0.0.1 is a loopback address"),
        ("169.254.169.254", "169.254.169.254 is a link-local address"),
        ("hooks.slack.com", None),  # a name: checked once resolved, at each connection
        ("93.184.216.34", None),
    ],
)
def test_a_configured_host_is_refused_before_any_lookup_when_it_cannot_be_public(
    host: str, problem: str | None
) -> None:
    assert configured_host_problem(host) == problem


def test_a_name_resolving_only_inside_is_refused_naming_each_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def getaddrinfo(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.1.2.3", port)),
        ]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    with pytest.raises(TargetRefused) as refused:
        connect_public(("hooks.example.com", 443))
    message = str(refused.value)
    assert "127.0.0.1 (loopback)" in message and "10.1.2.3 (private)" in message
    assert "JOBS_ALERT_ALLOW_PRIVATE_TARGETS" in message
