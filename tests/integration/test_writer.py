"""Writing a run's lines (jobs.runlog.writer) on real PostgreSQL: from a thread on its own
connection, committed while the run goes (not in the job's transaction), the bounds held in the
table, the last lines written before the run's end returns, and a write that fails leaving the
run alone."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

import pytest
from django.db import connection, transaction

from jobs.conf import RunLogConf
from jobs.models import Job, JobRun, RunLogLine
from jobs.runlog import writer as writer_module
from jobs.runlog.capture import capturing
from jobs.runlog.lines import Batch, Line, Lines
from jobs.runlog.writer import Writer, write
from tests.support.job_factory import new_run

pytestmark = pytest.mark.django_db(transaction=True)

log = logging.getLogger("tests.writer")


def _stored(run: JobRun) -> list[tuple[int, str, str]]:
    return list(
        RunLogLine.objects.filter(run=run).order_by("seq").values_list("seq", "level", "message")
    )


@pytest.fixture
def writers() -> Iterator[Callable[[], Writer]]:
    """Writers of the test's own, shut down (their connections closed) after it."""
    made: list[Writer] = []

    def make() -> Writer:
        made.append(Writer())
        return made[-1]

    yield make
    for writer in made:
        writer.shutdown()


@pytest.fixture
def run(make_job: Callable[..., Job]) -> JobRun:
    return new_run(make_job("talker"))


def test_a_batch_is_stored_and_written_again_changes_nothing(run: JobRun) -> None:
    batch = Batch(
        (Line(1, 1_700_000_000.5, "INFO", "one"), Line(2, 1_700_000_001.0, "STDOUT", "two"))
    )
    write(run.pk, batch)
    write(run.pk, batch)
    assert _stored(run) == [(1, "INFO", "one"), (2, "STDOUT", "two")]
    first = RunLogLine.objects.get(run=run, seq=1)
    assert first.at.timestamp() == 1_700_000_000.5


def test_lines_are_committed_while_the_run_goes_even_inside_the_jobs_transaction(
    run: JobRun, writers: Callable[[], Writer]
) -> None:
    conf = RunLogConf(max_lines=100, flush_seconds=0.05)
    seen = threading.Event()
    writer = writers()
    # The job's own transaction, never committed.
    with capturing(run.pk, conf=conf, writer=writer), transaction.atomic():
        log.info("written while the job's transaction is open")
        # Read from another connection: the line is there before the job's block ends.
        for _ in range(200):
            if _count_elsewhere(run.pk) == 1:
                seen.set()
                break
            writer.wake()
            threading.Event().wait(0.05)
        transaction.set_rollback(True)
    assert seen.is_set()
    assert _stored(run) == [(1, "INFO", "written while the job's transaction is open")]


def _count_elsewhere(run_id: int) -> int:
    counted: list[int] = []

    def count() -> None:
        from django.db import connections

        try:
            counted.append(RunLogLine.objects.filter(run_id=run_id).count())
        finally:
            connections.close_all()

    thread = threading.Thread(target=count)
    thread.start()
    thread.join()
    return counted[0]


def test_a_run_that_logs_a_great_many_lines_keeps_its_first_and_last(
    run: JobRun, writers: Callable[[], Writer]
) -> None:
    conf = RunLogConf(max_lines=10, flush_seconds=0.05)
    with capturing(run.pk, conf=conf, writer=writers()) as lines:
        for number in range(1, 100_001):
            log.info("line %d", number)
        assert lines is not None and lines.count == 100_000
    stored = _stored(run)
    assert [seq for seq, _, _ in stored] == [1, 2, 3, 4, 5, *range(99_996, 100_001)]
    assert stored[4][2] == "line 5" and stored[5][2] == "line 99996"


def test_the_last_lines_are_written_when_the_run_ends(
    run: JobRun, writers: Callable[[], Writer]
) -> None:
    conf = RunLogConf(max_lines=100, flush_seconds=3600)  # never by the period
    with capturing(run.pk, conf=conf, writer=writers()):
        log.warning("the only line")
        print("and a printed one")
    assert _stored(run) == [(1, "WARNING", "the only line"), (2, "STDOUT", "and a printed one")]


class _Kept(logging.Handler):
    """Keeps every record it is handed."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_failed_write_is_logged_and_the_run_goes_on(
    run: JobRun, writers: Callable[[], Writer]
) -> None:
    gone = run.pk
    run.delete()  # the run disappears under its own log: the lines cannot be stored
    conf = RunLogConf(max_lines=100, flush_seconds=3600)
    # Read at the writer's own logger, at its level: whatever an earlier test in this process
    # left of the root logger (a level above WARNING: capture raises root's handlers to it while
    # a run goes, and the thread may write, and fail, then).
    writer_log = logging.getLogger("jobs.runlog.writer")
    kept, level = _Kept(), writer_log.level
    writer_log.addHandler(kept)
    writer_log.setLevel(logging.WARNING)
    try:
        with capturing(gone, conf=conf, writer=writers()) as lines:
            log.warning("a line of a run that is no more")
    finally:
        writer_log.removeHandler(kept)
        writer_log.setLevel(level)
    assert lines is not None and lines.count == 1
    assert not RunLogLine.objects.filter(run_id=gone).exists()
    assert any(getattr(record, "action", None) == "run_log_not_written" for record in kept.records)


def test_the_thread_gives_its_connection_back_once_no_run_is_open(
    run: JobRun, monkeypatch: pytest.MonkeyPatch, writers: Callable[[], Writer]
) -> None:
    monkeypatch.setattr(writer_module, "LINGER_SECONDS", 0.0)
    writer = writers()
    lines = Lines(head=5, tail=5, max_chars=100)
    writer.open(run.pk, lines, 0.05)
    lines.add("INFO", "one", 0.0)
    assert writer.close(run.pk)
    assert _stored(run) == [(1, "INFO", "one")]
    pid = writer.connected_as
    assert pid is not None
    for _ in range(200):
        if not _backend_alive(pid):
            break
        threading.Event().wait(0.05)
    assert not _backend_alive(pid)


def _backend_alive(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
        (count,) = cursor.fetchone()
    return bool(count)


def test_the_unhurried_commit_leaves_nothing_on_the_session(
    run: JobRun, writers: Callable[[], Writer]
) -> None:
    """``SET LOCAL`` only: behind a transaction pooler, the server connection goes on to other
    clients, whose commits must still wait for the disk."""
    writer = writers()
    lines = Lines(head=5, tail=5, max_chars=100)
    writer.open(run.pk, lines, 3600)
    lines.add("INFO", "one", 0.0)
    assert writer.close(run.pk)
    database = writer._database
    assert database is not None and database.connection is not None
    with database.connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone() == ("on",)
    assert _stored(run) == [(1, "INFO", "one")]
