"""``manage.py apitoken create|list|revoke`` (jobs.management.commands.apitoken), on real
PostgreSQL: the secret printed alone and once, the listing without secrets, revocation, and
one-line errors with their exit status (2 usage, 1 no such token)."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from jobs.models import ApiToken
from jobs.web import tokens
from jobs.web.tokens import TokenRefused

pytestmark = pytest.mark.django_db


def apitoken(*args: str) -> str:
    out = io.StringIO()
    call_command("apitoken", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def apitoken_error(*args: str) -> CommandError:
    with pytest.raises(CommandError) as info:
        apitoken(*args)
    return info.value


def test_create_prints_only_the_secret_of_a_read_write_token_that_never_expires() -> None:
    secret = apitoken("create", "ci").strip()
    assert "\n" not in secret and " " not in secret
    token = tokens.authenticate(secret)
    assert (token.name, token.read_only, token.expires_at) == ("ci", False, None)
    assert token.created_by.startswith("cli:")


def test_create_read_only_and_expiring() -> None:
    secret = apitoken("create", "scraper", "--read-only", "--expires", "12h").strip()
    token = tokens.authenticate(secret)
    assert token.read_only
    assert token.expires_at is not None
    expected = timezone.now() + timedelta(hours=12)
    assert abs(token.expires_at - expected) < timedelta(minutes=1)


def test_list_shows_each_token_without_its_secret() -> None:
    ci = apitoken("create", "ci").strip()
    apitoken("create", "scraper", "--read-only", "--expires", "30d")
    apitoken("create", "old", "--expires", "1h")
    ApiToken.objects.filter(name="old").update(expires_at=timezone.now() - timedelta(hours=1))
    tokens.authenticate(ci)  # used once
    lines = {line.split()[0]: line for line in apitoken("list").splitlines()}
    assert set(lines) == {"ci", "scraper", "old"}
    assert "read-write" in lines["ci"] and "never expires" in lines["ci"]
    assert "last used never" not in lines["ci"]
    assert "read-only" in lines["scraper"] and "  expires " in lines["scraper"]
    assert "last used never" in lines["scraper"]
    assert "  expired " in lines["old"]
    assert ci not in apitoken("list")
    assert ApiToken.objects.get(name="ci").prefix in lines["ci"]


def test_revoke_deletes_the_token_and_its_secret_is_refused() -> None:
    secret = apitoken("create", "ci").strip()
    assert apitoken("revoke", "ci").strip() == "revoked ci"
    assert not ApiToken.objects.exists()
    with pytest.raises(TokenRefused):
        tokens.authenticate(secret)


def test_revoking_an_unknown_token_is_status_1() -> None:
    error = apitoken_error("revoke", "nobody")
    assert (str(error), error.returncode) == ("apitoken revoke: no token named 'nobody'", 1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["create"], "apitoken create: error: the following arguments are required: NAME"),
        (["create", "ci", "--expires", "soon"], "apitoken create: error: --expires: "),
        (["revoke"], "apitoken revoke: error: the following arguments are required: NAME"),
    ],
)
def test_usage_errors_are_one_line_with_status_2(args: list[str], message: str) -> None:
    error = apitoken_error(*args)
    assert str(error).startswith(message), str(error)
    assert "\n" not in str(error) and error.returncode == 2
    assert not ApiToken.objects.exists()


def test_a_name_taken_is_refused_naming_it() -> None:
    apitoken("create", "ci")
    error = apitoken_error("create", "ci")
    assert str(error).startswith("apitoken create: NAME: ") and error.returncode == 2
    assert ApiToken.objects.count() == 1
