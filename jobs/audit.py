"""The audit trail: who did what to which job, lease or token, when, with the values before and
after.

Entries are written by the write paths themselves (``jobs.services`` for jobs and leases,
``jobs.web.tokens`` for tokens), inside the transaction of the change, so an entry exists exactly
when its change was committed, whichever edge (admin, CLI, API) asked for it. Not by signals:
bulk updates and raw SQL bypass them. Each committed entry is also logged on ``jobs.audit``.

What ``before`` and ``after`` hold: for ``add`` the whole new job (``before`` null), for
``delete`` the whole job as it was (``after`` null), for ``edit`` only the fields that changed,
for pause/resume ``enabled`` and a paused job's ``paused_by``, ``pause_reason`` and
``paused_until``, for a lease its holder and token, for a token its name, scope,
creator and expiry (never its secret or a part of it).
"""

from __future__ import annotations

import getpass
import logging
import os
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db import transaction

from jobs.models import AuditAction, AuditEntry, AuditSource, Job
from jobs.registry import POLICY_FIELDS
from jobs.values.serializers import schedule_words, upstream_names

log = logging.getLogger("jobs.audit")

# The fields a job's state is recorded with, in the order people read them.
JOB_FIELDS = ("name", "task", "kind", "enabled", "schedule", "args", "kwargs", *POLICY_FIELDS)


@dataclass(frozen=True)
class Actor:
    """Who acts, and through which edge. ``str(actor)`` is what entries record."""

    kind: str  # user, token, cli or code
    name: str
    source: AuditSource

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"

    @classmethod
    def user(cls, user: AbstractBaseUser | AnonymousUser, source: AuditSource) -> Actor:
        return cls("user", user.get_username(), source)

    @classmethod
    def token(cls, name: str) -> Actor:
        return cls("token", name, AuditSource.API)

    @classmethod
    def cli(cls) -> Actor:
        """The operating-system user running ``manage.py``."""
        return cls("cli", _os_user(), AuditSource.CLI)

    @classmethod
    def code(cls, what: str) -> Actor:
        """Python code calling the services itself (declared jobs synced, scripts, tests)."""
        return cls("code", what, AuditSource.CODE)

    @classmethod
    def celery_control(cls, command: str) -> Actor:
        """A Celery remote-control command (``celery control revoke``): its message does not
        say who sent it."""
        return cls("celery", command, AuditSource.CELERY)


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # a uid with no passwd entry (containers) and no $USER
        return f"uid{os.getuid()}"


def job_state(job: Job) -> dict[str, Any]:
    """The job as entries record it; expects its beat entry selected with it."""
    values = {name: _stored(getattr(job, name)) for name in JOB_FIELDS if name != "schedule"}
    values["schedule"] = schedule_words(job)
    state = {name: values[name] for name in JOB_FIELDS}
    state["after"] = upstream_names(job)
    return state


def _stored(value: Any) -> Any:
    # A time (a calendar's active period) as ISO 8601: the entry is JSON.
    return value.isoformat() if isinstance(value, datetime) else value


def changed(before: dict[str, Any], after: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Only the keys whose values differ, on each side."""
    keys = [key for key in after if before.get(key) != after[key]]
    return {key: before.get(key) for key in keys}, {key: after[key] for key in keys}


def record(
    actor: Actor,
    action: AuditAction,
    *,
    job: Job | None = None,
    job_name: str = "",
    target: str = "",
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> AuditEntry:
    """Write one entry in the current transaction; log it once that commits."""
    entry = AuditEntry.objects.create(
        actor=str(actor),
        source=actor.source,
        action=action,
        job=job,
        job_name=job.name if job is not None else job_name,
        target=target,
        before=before,
        after=after,
    )
    transaction.on_commit(lambda: _log(entry))
    return entry


def _log(entry: AuditEntry) -> None:
    log.info(
        "audit: %s %s by %s",
        entry.action,
        entry.job_name or entry.target or "-",
        entry.actor,
        extra={
            "action": "audit",
            "audit_action": entry.action,
            "actor": entry.actor,
            "source": entry.source,
            "job": entry.job_name,
            "target": entry.target,
            "before": entry.before,
            "after": entry.after,
        },
    )
