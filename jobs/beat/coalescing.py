"""Back-pressure: a slot of a job that coalesces is recorded skipped, not queued, while the job's
previous run still waits in its queue, so an overloaded cluster does not pile up work."""

from __future__ import annotations

from collections.abc import Collection

from django.db import connection

# The new runs (just inserted by this beat, not yet published) whose job has an older run that
# is due and still `scheduled` (its message waits for a worker). One statement for a tick's
# chunk; only runs still `scheduled` change, so it never touches a run a worker took.
_SKIP_WHILE_QUEUED = """
UPDATE jobs_jobrun AS n
   SET status = 'skipped', finished_at = now(),
       error = format('coalesced: run %%s of this job still waits in its queue', q.id)
  FROM (SELECT DISTINCT ON (o.job_id) o.job_id, o.id
          FROM jobs_jobrun AS o
         WHERE o.job_id = ANY(%(jobs)s) AND o.status = 'scheduled'
           AND o.scheduled_for <= now() AND NOT o.id = ANY(%(new)s)
           -- a backfill run waiting for its release (jobs.workflow.backfill) is in no queue yet
           AND (o.trigger <> 'backfill' OR o.released_at IS NOT NULL)
         ORDER BY o.job_id, o.id) AS q
 WHERE n.id = ANY(%(new)s) AND n.job_id = q.job_id AND n.status IS NOT DISTINCT FROM 'scheduled'
RETURNING n.id
"""


def skip_while_queued(new_runs: Collection[tuple[int, int]]) -> set[int]:
    """Of ``(run_id, job_id)`` pairs just inserted, record skipped those whose job still has an
    older run waiting in its queue; their ids (not to be published)."""
    if not new_runs:
        return set()
    params = {
        "new": [run_id for run_id, _ in new_runs],
        "jobs": sorted({job_id for _, job_id in new_runs}),
    }
    with connection.cursor() as cursor:
        cursor.execute(_SKIP_WHILE_QUEUED, params)
        return {row[0] for row in cursor.fetchall()}
