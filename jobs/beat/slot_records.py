"""The beat's statements about slots: the one record each slot gets (guarantee 1), the record
of slots nobody fired in time (guarantee 6), the newest slot on record (catch-up), and the stamp
that says a slot's message went out.

They write ``jobs_jobrun`` as the rest of a run's life does (``jobs.guard.run_records``: the
claim, the finish), and share its rules: a slot's blackout window and its calendar's verdict
are the fragments written there.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection

from jobs.guard.run_records import NewRun, calendar_status_pg, skip_reason_pg

# Guarantee 1: the partial unique index makes the first insert of a slot win; every other beat's
# insert of the same slot does nothing and returns no row, so only the winner publishes. The
# winner publishes right after and then stamps dispatched_at (``mark_published``); if that beat
# dies before, maintenance finds the run never sent and publishes it (guarantee 4).
# A slot in a blackout window, or that the job's calendar skips (``reason``, computed by the
# beat: jobs.schedule.calendars), is recorded skipped in the same insert, and not published.
_INSERT_SLOTS = f"""
INSERT INTO jobs_jobrun (job_id, scheduled_for, trigger, status, finished_at, error)
SELECT job_id, slot, 'scheduled', {calendar_status_pg("why")}
  FROM (SELECT t.job_id, t.slot,
               {skip_reason_pg("t.job_id", "t.slot", "t.reason")}
                 AS why  -- no reasons given: unnest pads the empty array with nulls
          FROM unnest(string_to_array(%s, ',')::bigint[], string_to_array(%s, ',')::timestamptz[],
                      coalesce(%s::text[], '{{}}')) AS t(job_id, slot, reason)
       ) AS d
ON CONFLICT (job_id, scheduled_for) WHERE trigger = 'scheduled' DO NOTHING
RETURNING id, job_id, scheduled_for, status
"""

# The runs of given slots still waiting for a worker (jobs.beat.uncertain_slots), found by the
# slot's unique index.
_SCHEDULED_RUNS_OF = """
SELECT r.id, r.job_id, r.scheduled_for, r.status
  FROM unnest(string_to_array(%s, ',')::bigint[], string_to_array(%s, ',')::timestamptz[])
       AS t(job_id, slot)
  JOIN jobs_jobrun AS r ON r.job_id = t.job_id AND r.scheduled_for = t.slot
 WHERE r.trigger = 'scheduled' AND r.status = 'scheduled'
"""

# Guarantee 6 for slots nobody fired in time (every beat down, or this beat stalled): the slot
# gets its one record, terminal and saying why. Same unique index as _INSERT_SLOTS, so a slot
# another beat did fire keeps its record and this insert does nothing.
_INSERT_MISSED = """
INSERT INTO jobs_jobrun (job_id, scheduled_for, trigger, status, finished_at, error)
SELECT job_id, slot, 'scheduled', 'missed', now(), error
  FROM unnest(%s::bigint[], %s::timestamptz[], %s::text[]) AS t(job_id, slot, error)
ON CONFLICT (job_id, scheduled_for) WHERE trigger = 'scheduled' DO NOTHING
RETURNING id, job_id, scheduled_for
"""

# The newest slot on record for each job (the index one_run_per_slot answers each with one
# backward probe), and the database clock, which catch-up trusts over the beat's own.
_NEWEST_SLOTS = """
SELECT j.id, (SELECT r.scheduled_for FROM jobs_jobrun AS r
               WHERE r.job_id = j.id AND r.trigger = 'scheduled'
               ORDER BY r.scheduled_for DESC LIMIT 1), now()
  FROM unnest(%s::bigint[]) AS j(id)
"""

# Runs whose messages the broker took: from now on their loss is told by their queue's depth.
_MARK_PUBLISHED = """
UPDATE jobs_jobrun SET dispatched_at = now()
 WHERE id = ANY(%s::bigint[]) AND dispatched_at IS NULL
"""


def insert_scheduled(
    pairs: Sequence[tuple[int, datetime]], *, reasons: Sequence[str] | None = None
) -> list[NewRun]:
    """Insert one run per ``(job_id, slot)``; return the ones this caller created. A slot with a
    ``reasons`` entry (the job's calendar) or in a blackout window is recorded skipped."""
    if not pairs:
        return []
    # The reasons only when one is given (see _as_texts for the ids and slots).
    why = list(reasons) if reasons is not None and any(reasons) else None
    return _slot_runs(_INSERT_SLOTS, [*_as_texts(pairs), why])


def scheduled_runs_of(pairs: Sequence[tuple[int, datetime]]) -> list[NewRun]:
    """The runs of these ``(job_id, slot)`` scheduled slots that are still ``scheduled``."""
    if not pairs:
        return []
    return _slot_runs(_SCHEDULED_RUNS_OF, list(_as_texts(pairs)))


def _as_texts(pairs: Sequence[tuple[int, datetime]]) -> tuple[str, str]:
    """The job ids and the slots as one text each (PostgreSQL splits and parses them): psycopg
    dumps a list element by element in Python, which cost a burst ~12 ms a chunk of 500, a sixth
    of its tick."""
    job_ids = ",".join([str(job_id) for job_id, _ in pairs])
    return job_ids, ",".join([slot.isoformat() for _, slot in pairs])


def _slot_runs(statement: str, params: list[Any]) -> list[NewRun]:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return [
            NewRun(run_id=r[0], job_id=r[1], scheduled_for=r[2], status=r[3])
            for r in cursor.fetchall()
        ]


def insert_missed(rows: Sequence[tuple[int, datetime, str]]) -> list[NewRun]:
    """Record each ``(job_id, slot, reason)`` as a missed run unless the slot has a record
    already; return the records this caller created."""
    if not rows:
        return []
    columns = list(zip(*rows, strict=True))
    with connection.cursor() as cursor:
        cursor.execute(_INSERT_MISSED, [list(columns[0]), list(columns[1]), list(columns[2])])
        return [NewRun(run_id=r[0], job_id=r[1], scheduled_for=r[2]) for r in cursor.fetchall()]


def newest_slots(job_ids: Sequence[int]) -> tuple[datetime, dict[int, datetime]]:
    """The database clock, and the newest scheduled slot on record of each job that has one."""
    with connection.cursor() as cursor:
        if not job_ids:
            cursor.execute("SELECT now()")
            return cursor.fetchone()[0], {}
        cursor.execute(_NEWEST_SLOTS, [list(job_ids)])
        rows = cursor.fetchall()
    return rows[0][2], {job_id: slot for job_id, slot, _ in rows if slot is not None}


def mark_published(run_ids: Sequence[int]) -> None:
    """Stamp dispatched_at on runs their beat has just published (``_MARK_PUBLISHED``)."""
    if run_ids:
        with connection.cursor() as cursor:
            cursor.execute(_MARK_PUBLISHED, [list(run_ids)])
