"""``ctx``: what a job function receives about its run."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction

from jobs.guard import lease


@dataclass
class JobContext:
    job_name: str
    run_id: int
    scheduled_for: datetime
    fencing_token: int | None
    attempt: int
    lease_key: str
    # Set when the lease is lost, a time limit nears or the node shuts down: return soon.
    stopping: threading.Event = field(default_factory=threading.Event)

    @property
    def idempotency_key(self) -> str:
        """For effects fencing cannot cover (an HTTP call, an email): pass this to the remote
        side so a repeated attempt of the same run and token is recognised there."""
        return f"run-{self.run_id}-token-{self.fencing_token}"

    @contextmanager
    def fenced(self) -> Iterator[None]:
        """A transaction whose writes commit only while this run still holds its lease.

        Raises ``jobs.exceptions.LeaseLost`` (and rolls back) when the lease lapsed or was taken
        over. On PostgreSQL a new acquirer waits until this transaction commits.
        """
        if self.fencing_token is None:
            raise RuntimeError("this run holds no lease (overlap policy 'allow'): nothing to fence")
        with transaction.atomic():
            lease.verify_held(self.lease_key, self.fencing_token)
            yield
