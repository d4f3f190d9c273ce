"""A transaction pooler in front of PostgreSQL without the settings it needs, said once, plainly.

Behind PgBouncer (or any pooler) in transaction mode, a statement psycopg prepared on one server
connection is unknown on the next (``prepared statement "_pg3_3" does not exist``, or ``... already
exists`` when a name is reused), and a server-side cursor opened in one transaction is gone in the
next. Without ``DATABASE_POOLER=transaction`` (``project/settings.py``; for an installed app the
``DATABASES`` options it sets) every process logs those errors over and over and runs a fraction
of its slots, and nothing says why.

Every query of every process goes through ``note_query_error`` (a Django execute wrapper installed
on each connection, ``install``), so each rule is written once for the beat's tick, the worker's
claim and finish, maintenance and the web. The first such error in a process is one error line
naming the cause and the fix; the process goes on as for any database error (its own handler logs
and retries). The problem is also recorded, on a connection of its own, in
``ConfigurationProblem`` (at most once a minute per process) for ``/healthz`` to show.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from collections.abc import Callable
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from jobs.process import process_state
from jobs.process.process_state import ProcessState

log = logging.getLogger(__name__)

CAUSE = "transaction_pooler"
HINT = (
    "the database is behind a transaction pooler (PgBouncer in transaction mode) but this "
    "process prepares statements and opens server-side cursors: set DATABASE_POOLER=transaction "
    "(project/settings.py), or in your own settings DATABASES['default']['OPTIONS']"
    "['prepare_threshold'] = None and DATABASES['default']['DISABLE_SERVER_SIDE_CURSORS'] = True"
)
RECORD_EVERY_SECONDS = 60.0
RECORD_TIMEOUT_SECONDS = 5

_PREPARED = re.compile(r'prepared statement "[^"]*" (does not exist|already exists)')
_DJANGO_CURSOR = re.compile(r'cursor "_django_curs_[^"]*" does not exist')


def is_pooler_error(error: BaseException) -> bool:
    """Whether ``error`` (a Django error or the driver's, or any error caused by one) is what a
    transaction pooler does to prepared statements or server-side cursors."""
    import psycopg.errors

    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(
            current,
            psycopg.errors.InvalidSqlStatementName | psycopg.errors.DuplicatePreparedStatement,
        ):
            return True
        text = str(current)
        if _PREPARED.search(text) or _DJANGO_CURSOR.search(text):
            return True
        current = current.__cause__ or current.__context__
    return False


class _State(ProcessState):
    def __init__(self) -> None:
        super().__init__()
        self.reported: str | None = None  # the first such error's text, once logged


_state = _State()


def _this_process() -> _State:
    global _state
    _state = process_state.mine(_state, _State)  # a forked worker child reports for itself
    return _state


def detected() -> str | None:
    """The first pooler error this process met (its text), or ``None``."""
    return _this_process().reported


def note(error: BaseException, *, database: dict[str, Any] | None = None) -> bool:
    """If ``error`` is a pooler's, say so (the first time in this process) and record it for
    ``/healthz``; ``True`` when it was one. Never raises."""
    try:
        if not is_pooler_error(error):
            return False
        state = _this_process()
        with state.lock:
            first = state.reported is None
            if first:
                state.reported = _first_line(error)
        record = state.record_due(RECORD_EVERY_SECONDS)
        if first:
            log.error(
                "%s (first seen: %s)",
                HINT,
                state.reported,
                extra={"action": "pooler_misconfigured", "cause": CAUSE},
            )
        if record and database is not None:
            record_problem(database, CAUSE, f"{HINT} (first seen: {state.reported or ''})")
        return True
    except Exception:  # a hint must never replace the error it explains
        log.debug("could not report a pooler error", exc_info=True)
        return False


_UPSERT = """
INSERT INTO jobs_configurationproblem (cause, message, process, first_seen, last_seen)
VALUES (%(cause)s, %(message)s, %(process)s, now(), now())
ON CONFLICT (cause) DO UPDATE
   SET message = EXCLUDED.message, process = EXCLUDED.process, last_seen = now()
"""


_LIBPQ_OPTIONS = frozenset(
    {
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "sslpassword",
        "options",
        "service",
        "passfile",
        "target_session_attrs",
        "application_name",
        "channel_binding",
        "gssencmode",
    }
)


def record_problem(database: dict[str, Any], cause: str, message: str) -> None:
    """Upsert the row of problem ``cause`` for ``/healthz`` on a short connection of its own,
    unprepared and autocommitted (the failing connection may be in a broken transaction).
    Never raises: a failure is logged."""
    import psycopg

    params = {
        key: value
        for key, value in {
            "dbname": database.get("NAME"),
            "user": database.get("USER"),
            "password": database.get("PASSWORD"),
            "host": database.get("HOST"),
            "port": database.get("PORT"),
        }.items()
        if value
    }
    # The connection options libpq knows (sslmode, options, service, ...), not Django's or
    # psycopg's own.
    options = database.get("OPTIONS") or {}
    params.update({key: value for key, value in options.items() if key in _LIBPQ_OPTIONS and value})
    try:
        with psycopg.connect(
            **params,
            autocommit=True,
            prepare_threshold=None,
            connect_timeout=RECORD_TIMEOUT_SECONDS,
        ) as conn:
            conn.execute(
                _UPSERT,
                {
                    "cause": cause,
                    "message": message[:2000],
                    "process": f"{socket.gethostname()}:{os.getpid()}"[:255],
                },
            )
    except Exception as exc:
        log.warning(
            "could not record the %s problem for /healthz: %s",
            cause,
            exc,
            extra={"action": "pooler_problem_not_recorded"},
        )


def note_query_error(
    execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]
) -> Any:
    """A Django execute wrapper: every query error passes by ``note`` before it goes on."""
    try:
        return execute(sql, params, many, context)
    except Exception as exc:
        note(exc, database=context["connection"].settings_dict)
        raise


def install(connection: BaseDatabaseWrapper, **_kwargs: Any) -> None:
    """``connection_created``: wrap this connection's queries (once per connection object)."""
    # First, so outermost, and so that a caller's ``connection.execute_wrapper()`` (which pops
    # the last one on exit) never pops ours when the connection opens inside its block.
    if connection.vendor == "postgresql" and note_query_error not in connection.execute_wrappers:
        connection.execute_wrappers.insert(0, note_query_error)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:500]
