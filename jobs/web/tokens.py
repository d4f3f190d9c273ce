"""API tokens: created once (the secret is shown then and never again), stored as a digest,
checked on every API or ``/metrics`` request. Creating and revoking one is recorded in the audit
trail (``jobs.audit``), with its name, scope, creator and expiry, never its secret."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.db.models.functions import Now
from django.http import HttpRequest
from django.utils import timezone

from jobs import audit
from jobs.audit import Actor
from jobs.exceptions import TokenRefused
from jobs.models import ApiToken, AuditAction
from jobs.values import text

# Every token starts with this, so a leaked one is easy to recognise (and to grep for).
TOKEN_PREFIX = "cj_"
# last_used_at is for people ("is this token still used?"), not an audit log: one write a minute
# at most, so a busy client does not turn every read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)
UNKNOWN = "unknown or revoked API token"


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create(
    name: str,
    *,
    actor: Actor,
    read_only: bool = False,
    expires_in: timedelta | None = None,
) -> tuple[ApiToken, str]:
    """A new token named ``name``; returns the row and the secret, which is not stored. A
    ``read_only`` one is refused every request that would change something (403); one with
    ``expires_in`` is refused (401) once that much time has passed."""
    problem = text.problem(name)
    if problem is not None:  # before the uniqueness check asks the database about it
        raise ValidationError({"name": [f"The name {problem}."]})
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(
        name=name,
        prefix=secret[:10],
        digest=digest(secret),
        read_only=read_only,
        created_by=str(actor),
        expires_at=None if expires_in is None else timezone.now() + expires_in,
    )
    token.full_clean(exclude=["digest"])
    try:
        with transaction.atomic():
            token.save()
            audit.record(actor, AuditAction.TOKEN_CREATE, target=name, after=_described(token))
    except IntegrityError:
        raise ValidationError({"name": [f"a token named {name!r} already exists"]}) from None
    return token, secret


@transaction.atomic
def revoke(name: str, *, actor: Actor) -> bool:
    """Delete the token named ``name``: requests with it get 401. ``False``: no such token."""
    if not text.is_storable(name):  # PostgreSQL cannot hold it, so no token is named so
        return False
    token = ApiToken.objects.select_for_update().filter(name=name).first()
    if token is None:
        return False
    token.delete()
    audit.record(actor, AuditAction.TOKEN_REVOKE, target=name, before=_described(token))
    return True


def _described(token: ApiToken) -> dict[str, Any]:
    """What the audit trail keeps of a token: never its secret, digest or prefix."""
    expires = None if token.expires_at is None else token.expires_at.isoformat()
    return {
        "name": token.name,
        "read_only": token.read_only,
        "created_by": token.created_by,
        "expires_at": expires,
    }


def bearer_secret(request: HttpRequest) -> str | None:
    """The secret of an ``Authorization: Bearer <token>`` header, if there is one."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def authenticate(secret: str) -> ApiToken:
    """The token whose secret this is; ``TokenRefused`` for an unknown, revoked or expired one.
    Expiry is judged by the database clock, like every other deadline of the cluster."""
    # The lookup is by digest: timing reveals nothing about the secret itself.
    if not text.is_storable(secret):  # PostgreSQL cannot hold it, so no token contains it
        raise TokenRefused(UNKNOWN)
    expired = ExpressionWrapper(Q(expires_at__lte=Now()), output_field=BooleanField())
    token = ApiToken.objects.annotate(expired=expired).filter(digest=digest(secret)).first()
    if token is None:
        raise TokenRefused(UNKNOWN)
    if getattr(token, "expired", False):
        assert token.expires_at is not None
        raise TokenRefused(
            f"API token {token.name!r} expired at {token.expires_at.isoformat()}; "
            "create a new one (manage.py apitoken create NAME --expires 30d)"
        )
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
