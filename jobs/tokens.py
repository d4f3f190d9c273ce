"""API tokens: created once (the secret is shown then and never again), stored as a digest,
checked on every API or ``/metrics`` request."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.http import HttpRequest
from django.utils import timezone

from jobs.models import ApiToken

# Every token starts with this, so a leaked one is easy to recognise (and to grep for).
TOKEN_PREFIX = "cj_"
# last_used_at is for people ("is this token still used?"), not an audit log: one write a minute
# at most, so a busy client does not turn every read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create(name: str, *, read_only: bool = False) -> tuple[ApiToken, str]:
    """A new token named ``name``; returns the row and the secret, which is not stored. A
    ``read_only`` one is refused every request that would change something (403)."""
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(name=name, prefix=secret[:10], digest=digest(secret), read_only=read_only)
    token.full_clean(exclude=["digest"])
    try:
        with transaction.atomic():
            token.save()
    except IntegrityError:
        raise ValidationError({"name": [f"a token named {name!r} already exists"]}) from None
    return token, secret


def revoke(name: str) -> bool:
    deleted, _ = ApiToken.objects.filter(name=name).delete()
    return deleted > 0


def bearer_secret(request: HttpRequest) -> str | None:
    """The secret of an ``Authorization: Bearer <token>`` header, if there is one."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def authenticate(secret: str) -> ApiToken | None:
    """The token whose secret this is; ``None`` for an unknown or revoked one."""
    # The lookup is by digest: timing reveals nothing about the secret itself.
    if "\x00" in secret:  # PostgreSQL text cannot hold NUL; no token contains one
        return None
    token = ApiToken.objects.filter(digest=digest(secret)).first()
    if token is None:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
