"""Who may see the cluster's internals: ``/metrics``, and the details of ``/healthz`` and
``/readyz`` (node names, queues, hosts, error texts), which an outsider could use to map the
deployment. Everyone else learns a probe's status only.

Allowed: a valid API token (``Authorization: Bearer``, read-only ones too), a client address in
``JOBS_METRICS_ALLOW_FROM`` (addresses or CIDR networks), or the admin session of an active
staff user with the ``jobs.view_job`` permission (what the dashboard asks for).
"""

from __future__ import annotations

from importlib import import_module
from ipaddress import ip_address

from django.conf import settings
from django.contrib.auth import get_user
from django.http import HttpRequest

from jobs.conf import get_ops_conf
from jobs.exceptions import TokenRefused
from jobs.values import text
from jobs.web import tokens

VIEW_PERMISSION = "jobs.view_job"


def sees_internals(request: HttpRequest) -> bool:
    """Whether ``request`` may see the internals. A request with a token is judged by the token
    alone. Raises ``DatabaseError`` when a token or a session must be looked up and cannot be;
    an allowed address needs no lookup."""
    secret = tokens.bearer_secret(request)
    if secret is not None:
        try:
            tokens.authenticate(secret)
        except TokenRefused:  # unknown, revoked or expired
            return False
        return True
    return allowed_address(request) or _permitted_session(request)


def allowed_address(request: HttpRequest) -> bool:
    try:
        client = ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(client in network for network in get_ops_conf().metrics_allow_from)


def _permitted_session(request: HttpRequest) -> bool:
    # Probes answer ahead of the session and authentication middleware (jobs.web.probes), so the
    # session is read here, and only when the request carries its cookie.
    key = request.COOKIES.get(settings.SESSION_COOKIE_NAME)
    if not key or not text.is_storable(key):  # PostgreSQL cannot hold it; no session key does
        return False
    request.session = import_module(settings.SESSION_ENGINE).SessionStore(key)
    user = get_user(request)
    return user.is_active and user.is_staff and user.has_perm(VIEW_PERMISSION)
