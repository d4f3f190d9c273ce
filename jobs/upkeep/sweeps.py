"""Maintenance's sweeps over scheduled runs (guarantee 4): runs past their start deadline
recorded missed, and runs whose message never went out, or went out and was lost, taken for
publishing again.

A run whose message a beat has recorded but not yet published is never counted lost: a beat
stamps ``dispatched_at`` only once its publish is done (``jobs.beat.slot_records.mark_published``),
and ``jobs.upkeep.maintenance`` reads the backlog before and after the queues' depths.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from jobs.guard.run_records import NewRun, deadline_from_pg
from jobs.models import Trigger

# Runs that maintenance looks after: every trigger's but a continuous job's tenure, which is its
# supervisor's business. Derived from Trigger, so a trigger added later (as 'call' and
# 'upstream' were, and were left stranded for ever when their message was lost) is looked after.
_MAINTAINED_TRIGGERS = (
    "(" + ", ".join(f"'{trigger}'" for trigger in Trigger if trigger != Trigger.CONTINUOUS) + ")"
)

# A scheduled run whose deadline passed with no claim (its message was lost, or every worker
# was busy or stopped) is missed; so is one whose job expired (Job.expires_at: a worker drops
# its message, which expired too). Conditional on status, so a concurrent claim and this update
# settle the run once: whichever comes second finds it no longer scheduled.
_EXPIRE_SCHEDULED = f"""
UPDATE jobs_jobrun AS r
   SET status = 'missed', finished_at = now(),
       error = CASE WHEN now() >= j.expires_at
                    THEN format('not started before its job expired at %%s (its message '
                                'expired then; recorded by maintenance)', j.expires_at)
                    ELSE format('not started within its start deadline of %%s s: no worker '
                                'claimed it (recorded by maintenance)', j.start_deadline) END
  FROM jobs_job AS j
 WHERE j.id = r.job_id AND r.status = 'scheduled' AND r.trigger IN {_MAINTAINED_TRIGGERS}
   AND (now() > {deadline_from_pg("r")} + make_interval(secs => j.start_deadline)
        OR now() >= j.expires_at)
RETURNING r.id
"""

# Stranded runs: still scheduled a while after their message went out (or after their slot, for
# a retry held until then) and still within their deadline. Taking them stamps dispatched_at, so
# the next pass leaves them alone for another while; repeated deliveries are no-ops at the claim.
# ``sent`` picks the runs whose message went out (true) or never did (false), ``queue`` one queue.
_STRANDED = f"""
s.status = 'scheduled' AND s.trigger IN {_MAINTAINED_TRIGGERS}
AND greatest(s.scheduled_for, coalesce(s.dispatched_at, s.created_at))
    < now() - make_interval(secs => %(after)s)
AND now() <= {deadline_from_pg("s")} + make_interval(secs => j.start_deadline)
"""
_TAKE_STRANDED = f"""
UPDATE jobs_jobrun AS r SET dispatched_at = now()
 WHERE r.id IN (
        SELECT s.id FROM jobs_jobrun AS s JOIN jobs_job AS j ON j.id = s.job_id
         WHERE {_STRANDED}
           AND (s.dispatched_at IS NOT NULL) = %(sent)s
           AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
         ORDER BY s.scheduled_for
         LIMIT %(limit)s
           FOR UPDATE OF s SKIP LOCKED)
RETURNING r.id, r.job_id, r.scheduled_for
"""

# Per queue with stranded runs whose message went out: how many are stranded, and how many due
# runs' messages (stranded or not) the queue should hold if none was lost. Only messages that
# went out before ``published_before`` count, and the database's now() of this statement is
# returned with them: read before a queue's depth, it bounds the messages that depth can hold
# (a beat stamps dispatched_at only once its publish is done, see mark_published).
_SENT_BACKLOG = f"""
SELECT j.queue, count(*) FILTER (WHERE {_STRANDED}), count(*), now()
  FROM jobs_jobrun AS s JOIN jobs_job AS j ON j.id = s.job_id
 WHERE s.status = 'scheduled' AND s.scheduled_for <= now()
   AND s.dispatched_at < coalesce(%(published_before)s::timestamptz, now())
   AND s.trigger IN {_MAINTAINED_TRIGGERS}
 GROUP BY j.queue
HAVING count(*) FILTER (WHERE {_STRANDED}) > 0
"""


@dataclass(frozen=True)
class QueueBacklog:
    queue: str
    stranded: int  # runs whose message went out long ago, still not claimed
    sent: int  # due runs whose message went out and that no worker claimed yet


def expire_scheduled() -> list[int]:
    """Record ``missed`` every scheduled run past its start deadline; their ids."""
    with connection.cursor() as cursor:
        cursor.execute(_EXPIRE_SCHEDULED, {})
        return [row[0] for row in cursor.fetchall()]


def take_stranded(
    after: float, limit: int, *, sent: bool, queue: str | None = None
) -> list[NewRun]:
    """Claim for re-publishing up to ``limit`` runs, oldest slot first, still scheduled
    ``after`` seconds past their dispatch (``sent``) or their slot (never sent), of ``queue``
    or every queue (see ``_TAKE_STRANDED``)."""
    params = {"after": after, "limit": limit, "sent": sent, "queue": queue}
    with connection.cursor() as cursor:
        cursor.execute(_TAKE_STRANDED, params)
        return [NewRun(run_id=r[0], job_id=r[1], scheduled_for=r[2]) for r in cursor.fetchall()]


def sent_backlog(
    after: float, published_before: datetime | None = None
) -> tuple[datetime | None, list[QueueBacklog]]:
    """The queues with runs stranded ``after`` seconds past their dispatch, counting only the
    messages that went out before ``published_before`` (default: now), and the database clock
    of the reading (``None`` when no queue has any: see ``_SENT_BACKLOG``)."""
    params = {"after": after, "published_before": published_before}
    with connection.cursor() as cursor:
        cursor.execute(_SENT_BACKLOG, params)
        rows = cursor.fetchall()
    read_at = rows[0][3] if rows else None
    return read_at, [QueueBacklog(queue=q, stranded=s, sent=n) for q, s, n, _ in rows]
