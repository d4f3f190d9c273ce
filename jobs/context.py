"""``ctx``: what a job function receives about its run."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, transaction

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
    # A run made by its upstreams' success (jobs.workflow.dependencies): the upstream run that made
    # it.
    upstream_run_id: int | None = None

    @property
    def upstream_slot(self) -> datetime | None:
        """The slot the upstreams ran for, when they made this run (it is this run's slot)."""
        return self.scheduled_for if self.upstream_run_id is not None else None

    @property
    def idempotency_key(self) -> str:
        """For effects fencing cannot cover (an HTTP call, an email): pass this to the remote
        side so it can drop a repeat. The same for every attempt of one slot or trigger (a
        redelivery, a retry, the rerun of ``on_lost=retry``): the first attempt's run id."""
        if self.attempt <= 1:
            return f"{self.job_name}:run-{self.run_id}"
        return f"{self.job_name}:run-{first_attempt(self.run_id)}"

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


# A retry is a new run whose retry_of is the attempt before it; the chain ends at the first.
_FIRST_ATTEMPT = """
WITH RECURSIVE chain(id, retry_of_id) AS (
    SELECT id, retry_of_id FROM jobs_jobrun WHERE id = %s
    UNION ALL
    SELECT r.id, r.retry_of_id FROM jobs_jobrun AS r JOIN chain ON r.id = chain.retry_of_id
)
SELECT min(id) FROM chain
"""


def first_attempt(run_id: int) -> int:
    """The run id of the first attempt of ``run_id``'s chain of retries. Retention deletes a
    finished first attempt only after its retries are days old; until then this is exact."""
    with connection.cursor() as cursor:
        cursor.execute(_FIRST_ATTEMPT, [run_id])
        row = cursor.fetchone()
    return int(row[0]) if row and row[0] is not None else run_id
