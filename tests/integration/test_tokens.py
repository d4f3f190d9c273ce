"""API tokens (jobs.web.tokens), against real PostgreSQL: the secret shown once and stored as a
digest, refused once revoked or expired (by the database clock), last use written at most once a
minute, and creation and revocation audited without the secret."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.test import RequestFactory
from django.utils import timezone

from jobs.audit import Actor
from jobs.exceptions import TokenRefused
from jobs.models import ApiToken, AuditAction, AuditEntry
from jobs.web import tokens

pytestmark = pytest.mark.django_db

TESTS = Actor.code("tests")


def test_a_token_keeps_a_digest_and_a_prefix_never_its_secret() -> None:
    token, secret = tokens.create("deploy", actor=TESTS, read_only=True)
    assert secret.startswith(tokens.TOKEN_PREFIX) and len(secret) > 40
    stored = ApiToken.objects.get(name="deploy")
    assert stored.digest == hashlib.sha256(secret.encode()).hexdigest() == tokens.digest(secret)
    assert stored.prefix == secret[:10] and stored.read_only
    assert secret not in str(list(ApiToken.objects.values()))
    assert tokens.authenticate(secret).pk == token.pk


def test_a_name_is_one_tokens() -> None:
    tokens.create("deploy", actor=TESTS)
    with pytest.raises(ValidationError) as info:
        tokens.create("deploy", actor=TESTS)
    assert "already exists" in " ".join(info.value.message_dict["name"])
    assert ApiToken.objects.count() == 1


def test_creation_and_revocation_are_audited_without_the_secret() -> None:
    _, secret = tokens.create("deploy", actor=TESTS, expires_in=timedelta(days=30))
    assert tokens.revoke("deploy", actor=TESTS)
    assert not tokens.revoke("deploy", actor=TESTS) and not tokens.revoke("x\x00", actor=TESTS)
    created = AuditEntry.objects.get(action=AuditAction.TOKEN_CREATE)
    revoked = AuditEntry.objects.get(action=AuditAction.TOKEN_REVOKE)
    assert created.target == revoked.target == "deploy"
    assert created.after is not None and set(created.after) == {
        "name", "read_only", "created_by", "expires_at",
    }  # fmt: skip
    assert secret not in str(created.after) and secret[:10] not in str(created.after)
    with pytest.raises(TokenRefused, match="unknown or revoked"):
        tokens.authenticate(secret)


def test_an_expired_token_is_refused_saying_how_to_get_another() -> None:
    _, secret = tokens.create("short", actor=TESTS, expires_in=timedelta(days=1))
    ApiToken.objects.filter(name="short").update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(TokenRefused, match=r"'short' expired at .*apitoken create NAME"):
        tokens.authenticate(secret)


def test_unknown_secrets_are_refused() -> None:
    for secret in ("cj_not-a-token", "cj_\x00"):
        with pytest.raises(TokenRefused, match="unknown or revoked"):
            tokens.authenticate(secret)


def test_last_use_is_written_at_most_once_a_minute() -> None:
    _, secret = tokens.create("scraper", actor=TESTS)
    first = tokens.authenticate(secret).last_used_at
    assert first is not None
    assert tokens.authenticate(secret).last_used_at == first  # within the minute: no write
    ApiToken.objects.filter(name="scraper").update(last_used_at=first - timedelta(minutes=2))
    assert tokens.authenticate(secret).last_used_at > first  # type: ignore[operator]


def test_the_bearer_secret_is_read_from_the_authorization_header() -> None:
    factory = RequestFactory()
    assert tokens.bearer_secret(factory.get("/", HTTP_AUTHORIZATION="Bearer  cj_abc ")) == "cj_abc"
    assert tokens.bearer_secret(factory.get("/", HTTP_AUTHORIZATION="bearer cj_abc")) == "cj_abc"
    for header in ("Basic dXNlcjpwYXNz", "Bearer ", "cj_abc"):
        assert tokens.bearer_secret(factory.get("/", HTTP_AUTHORIZATION=header)) is None
    assert tokens.bearer_secret(factory.get("/")) is None
