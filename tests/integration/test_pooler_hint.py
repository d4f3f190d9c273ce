"""A transaction pooler without DATABASE_POOLER=transaction (jobs.database.pooler_hint): the worker
says why once, /healthz shows it, and the rule knows the pooler's errors and nothing else. Behind
the tests' private PgBouncer (tests/integration/test_pooler.py checks that it pools by
transaction)."""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable, Iterator
from datetime import timedelta

import psycopg
import pytest
from django.db import DatabaseError, connection
from django.db import ProgrammingError as DjangoProgrammingError
from django.test import Client
from django.utils import timezone

from devtools.pgbouncer import transaction_pooler
from jobs.beat import slot_records
from jobs.database import pooler_hint
from jobs.guard.runner import execute_run
from jobs.models import Job
from tests.acceptance.conftest import live_database_url
from tests.integration.conftest import Published


@contextlib.contextmanager
def _through_the_pooler_unconfigured(pooler_port: int) -> Iterator[None]:
    """This thread's Django connection through ``pooler_port``, preparing every statement (as
    psycopg's default does from a statement's 5th run: the tests' beat would take minutes), as
    someone who installed the app behind PgBouncer without the setting would run."""
    saved = copy.deepcopy(connection.settings_dict)
    connection.close()
    connection.settings_dict["HOST"] = "127.0.0.1"
    connection.settings_dict["PORT"] = pooler_port
    connection.settings_dict["OPTIONS"] = {
        key: value
        for key, value in connection.settings_dict.get("OPTIONS", {}).items()
        if key != "prepare_threshold"
    }
    connection.settings_dict["DISABLE_SERVER_SIDE_CURSORS"] = False
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


@contextlib.contextmanager
def _holding_the_last_server(url: str) -> Iterator[None]:
    """Another client holds, in a transaction, the server connection PgBouncer would hand out
    next (the last one used): the next client's statements run on another server, where the
    statements it prepared before do not exist."""
    with psycopg.connect(url, prepare_threshold=None) as other:
        other.execute("SELECT 1")  # BEGIN: the server is this client's until the rollback
        yield
        other.rollback()


def _worker_runs(run_id: int) -> int:
    """1 when the worker's delivery of ``run_id`` fails on a database error (Celery then fails
    the task, and its Django fixup closes the connection), else 0."""
    try:
        execute_run(run_id, task_id=f"task-{run_id}", node="worker@a")
    except DatabaseError:
        connection.close()
        return 1
    return 0


def test_a_worker_behind_an_unconfigured_pooler_says_why_once_and_healthz_shows_it(
    transactional_db: None,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    insider: Client,
    make_job: Callable[..., Job],
    published: Published,
) -> None:
    """The run statements (claim, finish, leases) are prepared (``jobs.guard.lease``): without
    the setting the first one run on another server connection fails. The worker's claim fails
    as for any database error (the message is retried by Celery, the run re-published), and
    says why once."""
    monkeypatch.setattr(pooler_hint, "_state", pooler_hint._State())
    caplog.set_level(logging.INFO)
    job = make_job()
    now = timezone.now()
    runs = slot_records.insert_scheduled(
        [(job.pk, now - timedelta(milliseconds=n)) for n in range(1, 9)]
    )
    failed = 0
    with transaction_pooler(live_database_url()) as pooler:
        with _through_the_pooler_unconfigured(pooler.port):
            for free, held in zip(runs[0::2], runs[1::2], strict=True):
                # Prepares the claim and the finish on the server the pool hands out (or fails
                # there: a server keeps what an earlier client prepared under the same name).
                failed += _worker_runs(free.run_id)
                with _holding_the_last_server(pooler.url):
                    failed += _worker_runs(held.run_id)  # on another server
        assert failed >= 1  # and the worker went on to the next message each time
        hints = [r for r in caplog.records if getattr(r, "action", "") == "pooler_misconfigured"]
        assert len(hints) == 1, [r.getMessage() for r in caplog.records]
        assert hints[0].levelno == logging.ERROR
        message = hints[0].getMessage()
        assert "DATABASE_POOLER=transaction" in message
        assert "'prepare_threshold'] = None" in message
        assert "DISABLE_SERVER_SIDE_CURSORS'] = True" in message
        assert 'prepared statement "_pg3_' in message
        assert "\n" not in message
        # The web (another process) learns it from the row the worker recorded.
        monkeypatch.setattr(pooler_hint, "_state", pooler_hint._State())
        response = insider.get("/healthz")
    configuration = response.json()["checks"]["configuration"]
    assert configuration["ok"] is False
    (problem,) = configuration["problems"]
    assert problem["cause"] == "transaction_pooler"
    assert "DATABASE_POOLER=transaction" in problem["message"]
    assert response.status_code == 503


def test_the_rule_knows_the_pooler_errors_and_nothing_else() -> None:
    missing = psycopg.errors.InvalidSqlStatementName('prepared statement "_pg3_3" does not exist')
    wrapped = DjangoProgrammingError(str(missing))
    wrapped.__cause__ = missing
    assert pooler_hint.is_pooler_error(wrapped)
    assert pooler_hint.is_pooler_error(
        DjangoProgrammingError('prepared statement "_pg3_0" already exists')
    )
    assert pooler_hint.is_pooler_error(
        DjangoProgrammingError('cursor "_django_curs_1_sync_2" does not exist')
    )
    assert not pooler_hint.is_pooler_error(DjangoProgrammingError('relation "x" does not exist'))
    assert not pooler_hint.is_pooler_error(ValueError("prepared statement"))
