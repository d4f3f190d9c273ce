"""Who may see the cluster's internals (jobs.web.access), against real PostgreSQL: a valid API
token alone decides when one is sent; otherwise an allowed address or an active staff session
with the view permission."""

from __future__ import annotations

from ipaddress import ip_network
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.http import HttpRequest
from django.test import Client, RequestFactory

from jobs.audit import Actor
from jobs.web import access, tokens

pytestmark = pytest.mark.django_db

TESTS = Actor.code("tests")


@pytest.fixture
def allowed_network(monkeypatch: pytest.MonkeyPatch) -> None:
    conf = SimpleNamespace(metrics_allow_from=[ip_network("10.1.0.0/16")])
    monkeypatch.setattr(access, "get_ops_conf", lambda: conf)


def test_a_valid_token_sees_and_a_refused_one_does_not_wherever_it_comes_from(
    allowed_network: None,
) -> None:
    secret = tokens.create("scraper", actor=TESTS, read_only=True)[1]
    factory = RequestFactory()
    assert access.sees_internals(factory.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {secret}"))
    refused = factory.get(
        "/metrics", HTTP_AUTHORIZATION="Bearer not-a-token", REMOTE_ADDR="10.1.2.3"
    )
    assert not access.sees_internals(refused)  # judged by the token alone


def test_an_address_in_the_allowed_networks_sees(allowed_network: None) -> None:
    factory = RequestFactory()
    assert access.sees_internals(factory.get("/metrics", REMOTE_ADDR="10.1.2.3"))
    assert not access.sees_internals(factory.get("/metrics", REMOTE_ADDR="10.2.0.1"))
    assert not access.allowed_address(factory.get("/metrics", REMOTE_ADDR="not-an-address"))


def _session_request(user: User) -> HttpRequest:
    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    request = RequestFactory().get("/metrics", REMOTE_ADDR="192.0.2.1")
    request.COOKIES[settings.SESSION_COOKIE_NAME] = cookie
    return request


def test_a_staff_session_with_the_view_permission_sees(allowed_network: None) -> None:
    viewer = User.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_job"))
    plain_staff = User.objects.create_user("staff", is_staff=True)
    assert access.sees_internals(_session_request(viewer))
    assert not access.sees_internals(_session_request(plain_staff))
    nul = RequestFactory().get("/metrics", REMOTE_ADDR="192.0.2.1")
    nul.COOKIES[settings.SESSION_COOKIE_NAME] = "bad\x00key"
    assert not access.sees_internals(nul)
