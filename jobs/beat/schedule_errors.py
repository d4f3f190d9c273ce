"""Jobs a beat cannot schedule, kept in ``ScheduleError`` so every view can show why.

A beat that fails to compute a job's slots (a cron that never fires, an unknown time zone, any
row written around validation) sets that job aside and records the error here; the job is read
again at its next edit, and the row is deleted once a beat can schedule it. Several beats write
the same rows: an unchanged error is not rewritten, so they do not churn.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from django.db import connection

# Errors are shown whole in the admin; a pathological one (a 5 MB cron field) is cut.
MAX_ERROR_LENGTH = 2_000

_RECORD = """
INSERT INTO jobs_scheduleerror (job_id, error, beat, detected_at)
SELECT j.id, e.error, %(beat)s, now()
  FROM unnest(%(ids)s::bigint[], %(errors)s::text[]) AS e(id, error)
  JOIN jobs_job AS j ON j.id = e.id
ON CONFLICT (job_id) DO UPDATE
   SET error = EXCLUDED.error, beat = EXCLUDED.beat, detected_at = EXCLUDED.detected_at
 WHERE jobs_scheduleerror.error IS DISTINCT FROM EXCLUDED.error
"""

_CLEAR = "DELETE FROM jobs_scheduleerror WHERE job_id = ANY(%(ids)s::bigint[])"

_CLEAR_ALL_BUT = "DELETE FROM jobs_scheduleerror WHERE NOT (job_id = ANY(%(ids)s::bigint[]))"


def record(errors: Mapping[int, str], beat: str) -> None:
    """Record ``{job_id: error}``; jobs deleted meanwhile are left out."""
    if not errors:
        return
    texts = [_printable(text) for text in errors.values()]
    with connection.cursor() as cursor:
        cursor.execute(_RECORD, {"ids": list(errors), "errors": texts, "beat": beat})


def clear(job_ids: Collection[int]) -> None:
    """These jobs can be scheduled (or are paused, continuous or gone): no error to show."""
    if job_ids:
        with connection.cursor() as cursor:
            cursor.execute(_CLEAR, {"ids": list(job_ids)})


def clear_all_but(job_ids: Collection[int]) -> None:
    """After reading every job: only ``job_ids`` are broken."""
    with connection.cursor() as cursor:
        cursor.execute(_CLEAR_ALL_BUT, {"ids": list(job_ids)})


def describe(exc: BaseException) -> str:
    """The error as an operator reads it: what failed, never a traceback."""
    text = str(exc) or type(exc).__name__
    if not isinstance(exc, ValueError):
        text = f"{type(exc).__name__}: {text}"
    return text


def _printable(text: str) -> str:
    # PostgreSQL text cannot hold NUL; the error may quote the row that carries one.
    return text.replace("\x00", "\\x00")[:MAX_ERROR_LENGTH]
