"""Where a webhook may be posted: only to public addresses, unless
``JOBS_ALERT_ALLOW_PRIVATE_TARGETS`` allows the others.

A webhook URL is written by whoever configures the deployment, and the senders run inside the
cluster's network: a URL naming a cloud's metadata service (``169.254.169.254``), the broker
(``127.0.0.1:6379``) or another internal host would make every alert a request from inside.
The URL is checked when the settings are read (an address written in it, or ``localhost``), and
each connection is checked again after its name is resolved, against the very address it is
then made to, so a name that resolves to a public address at start-up and to an internal one
later (DNS rebinding) is refused too. No proxy and no redirect is followed: either would send
the request to an address this check never saw.
"""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Callable
from http.client import HTTPConnection, HTTPResponse, HTTPSConnection
from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import IO, Any
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

ALLOW_SETTING = "JOBS_ALERT_ALLOW_PRIVATE_TARGETS"

Address = IPv4Address | IPv6Address


class TargetRefused(OSError):
    """The webhook's host is, or resolves only to, an address that is not public."""


def require_http_url(setting: str, value: str) -> None:
    """Refuse ``value`` of ``setting`` unless it is an http:// or https:// URL with a host."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ImproperlyConfigured(f"{setting}={value!r} must be an http:// or https:// URL.")


def non_public_kind(address: Address) -> str | None:
    """What kind of non-public address ``address`` is (``loopback``, ``link-local``...), or
    ``None`` for a public one."""
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1 reaches 127.0.0.1
    for kind, test in (
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("unspecified", address.is_unspecified),
        ("multicast", address.is_multicast),
        ("reserved", address.is_reserved),
        ("private", address.is_private),
    ):
        if test:
            return kind
    return None if address.is_global else "non-public"


def configured_host_problem(host: str) -> str | None:
    """Why a URL naming ``host`` is refused before any lookup: an address written in it that is
    not public, or ``localhost`` (always the loopback, RFC 6761); ``None`` otherwise."""
    name = host.rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return f"{host} is a loopback name"
    try:
        address = ip_address(name)
    except ValueError:
        return None  # a name: checked once resolved, at each connection
    kind = non_public_kind(address)
    return None if kind is None else f"{host} is a {kind} address"


def connect_public(
    address: tuple[str, int],
    timeout: float | None = None,
    source_address: tuple[str, int] | None = None,
    *,
    allow_private: bool = False,
) -> socket.socket:
    """A connection to ``address`` made only to an address its name resolves to that may be
    used; :class:`TargetRefused` when none may."""
    host, port = address
    refused: list[str] = []
    last_error: OSError | None = None
    for family, kind, proto, _, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        resolved = ip_address(str(sockaddr[0]).split("%", 1)[0])
        problem = non_public_kind(resolved)
        if problem is not None and not allow_private:
            refused.append(f"{resolved} ({problem})")
            continue
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            if source_address is not None:
                sock.bind(source_address)
            sock.connect(sockaddr)
        except OSError as exc:
            sock.close()
            last_error = exc
            continue
        return sock
    if last_error is not None:
        raise last_error
    raise TargetRefused(
        f"{host} resolves to {', '.join(refused)}: not a public address, refused "
        f"(set {ALLOW_SETTING} to allow)"
    )


def _checked(connection_class: type[HTTPConnection], allow_private: bool) -> Callable[..., Any]:
    def make(*args: Any, **kwargs: Any) -> HTTPConnection:
        connection = connection_class(*args, **kwargs)
        # http.client makes every connection of the request, the TLS one included, through this.
        connection._create_connection = (  # type: ignore[attr-defined]
            lambda address, timeout=None, source=None: connect_public(
                address, timeout, source, allow_private=allow_private
            )
        )
        return connection

    return make


class _CheckedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, allow_private: bool) -> None:
        super().__init__()
        self._allow_private = allow_private

    def http_open(self, req: urllib.request.Request) -> HTTPResponse:
        return self.do_open(_checked(HTTPConnection, self._allow_private), req)


class _CheckedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, allow_private: bool) -> None:
        super().__init__()
        self._allow_private = allow_private

    def https_open(self, req: urllib.request.Request) -> HTTPResponse:
        return self.do_open(
            _checked(HTTPSConnection, self._allow_private),
            req,
            context=self._context,  # type: ignore[attr-defined]
        )


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_args: Any, **_kwargs: Any) -> None:
        return None  # the 3xx answer is then an HTTPError: a failed delivery that says so


def open_checked(
    request: urllib.request.Request, timeout: float, *, allow_private: bool
) -> IO[bytes]:
    """``urlopen`` for a webhook: no proxy, no redirect, and each connection checked."""
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler({}),
        urllib.request.UnknownHandler(),
        _CheckedHTTPHandler(allow_private),
        _CheckedHTTPSHandler(allow_private),
        urllib.request.HTTPDefaultErrorHandler(),
        _NoRedirect(),
        urllib.request.HTTPErrorProcessor(),
    ):
        opener.add_handler(handler)
    response: IO[bytes] = opener.open(request, timeout=timeout)
    return response
