"""Reading the schedule change log (``ScheduleChange``), which database triggers append to on
every edit of a job, its beat entry or a schedule row (migration ``0005_schedule_change_log``),
and on every addition or edit of a django-celery-beat entry that no job owns, to adopt
(``0014_adoption``).

A beat remembers the newest entry id it has applied and, every tick, asks for the entries after
it: one primary-key range scan that returns nothing while nobody edits, however many jobs exist.
The triggers serialise writers, so ids are committed in order and a beat never skips an entry
that commits late. Maintenance prunes entries older than ``RETENTION``; a beat that has not read
the log for half that long reloads everything instead of trusting it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import connection

RETENTION = timedelta(hours=1)

_AFTER = """
SELECT id, job_id, periodic_task_id FROM jobs_schedulechange
 WHERE id > %(after)s ORDER BY id LIMIT %(limit)s
"""

_NEWEST = "SELECT coalesce(max(id), 0) FROM jobs_schedulechange"

_PRUNE = "DELETE FROM jobs_schedulechange WHERE changed_at < now() - make_interval(secs => %(age)s)"


@dataclass(frozen=True)
class Changes:
    newest_id: int  # the newest entry read (the caller's new position)
    job_ids: frozenset[int]
    # django-celery-beat entries that no job owned when they were added or edited (to adopt).
    periodic_task_ids: frozenset[int]
    complete: bool  # False: more entries than ``limit`` waited; reload everything instead


def newest_id() -> int:
    """The position of a reader that has seen everything up to now."""
    with connection.cursor() as cursor:
        cursor.execute(_NEWEST)
        newest: int = cursor.fetchone()[0]
    return newest


def read_after(after: int, limit: int) -> Changes:
    """The jobs edited since entry ``after``."""
    with connection.cursor() as cursor:
        cursor.execute(_AFTER, {"after": after, "limit": limit + 1})
        rows = cursor.fetchall()
    complete = len(rows) <= limit
    rows = rows[:limit]
    return Changes(
        newest_id=rows[-1][0] if rows else after,
        job_ids=frozenset(job_id for _, job_id, _ in rows if job_id is not None),
        periodic_task_ids=frozenset(entry for _, _, entry in rows if entry is not None),
        complete=complete,
    )


def prune(age: timedelta = RETENTION) -> int:
    """Delete entries older than ``age``. Ids never restart, so readers' positions stay valid."""
    with connection.cursor() as cursor:
        cursor.execute(_PRUNE, {"age": age.total_seconds()})
        return cursor.rowcount
