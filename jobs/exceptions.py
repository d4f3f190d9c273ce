"""One exception hierarchy for the app; the edges (admin, CLI, API) turn these into messages."""

from __future__ import annotations

from django.core.exceptions import ValidationError


class JobsError(Exception):
    """Base class of every error this app raises on purpose."""


class UnknownJobFunction(JobsError):
    """A job names a function that no module registered with ``@job``."""


class BadLockKey(JobsError):
    """A job's declaration cannot derive a usable lock key from the job's arguments."""


class RegistryConflict(JobsError):
    """Two functions were registered under one name."""


class NameReadsLikeAnother(JobsError, ValidationError):
    """A name whose confusable skeleton another row of its kind holds (``jobs.values.names``): the
    database's unique constraint refused it, as when two look-alikes are created at once. A
    ``ValidationError`` on ``name`` too, so every edge shows it as it shows a validator's."""


class NotFound(JobsError):
    """No row with the given name (the CLI's exit status 1, the API's 404)."""


class JobNotFound(NotFound):
    """No job row with the given name."""


class BlackoutNotFound(NotFound):
    """No blackout window with the given name."""


class NotTriggerable(JobsError):
    """A continuous job runs all the time on one node; it has no runs to trigger."""


class IdempotencyKeyReused(JobsError):
    """A trigger carries the Idempotency-Key of an earlier one but another request: replaying
    the earlier run would answer a request that was not made (the API's 422)."""


class LeaseLost(JobsError):
    """The caller's lease lapsed or was taken over: its fenced write must not happen."""


class TokenRefused(JobsError):
    """An API token that is unknown, revoked or expired; the message says which."""


class RunFailed(JobsError):
    """Raised to Celery after a run was recorded ``failed``, so Celery and Flower report the
    task as a failure; the job's own exception, when there is one, is its cause."""


class RunLost(JobsError):
    """Raised to Celery after a run was recorded ``lost`` (its lease lapsed while it ran)."""


class NoJobForCall(JobsError):
    """A guarded task was called but no job (or more than one) runs it: its call has no lease,
    policies or history to share."""


class DuplicateCall(JobsError):
    """A guarded task with ``raise_on_duplicate`` was called while a run of its lock key holds
    the lease or waits to run (celery-singleton's ``DuplicateTaskError``, celery-once's
    ``AlreadyQueued``)."""
