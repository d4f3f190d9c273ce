"""Catching a run's lines in its process (jobs.runlog.capture): records at the job's level, the
printed lines of stdout and stderr (passed on as before, also when Celery redirects them into a
logger), never another run's records, and the process's own logging left as it was."""

from __future__ import annotations

import io
import logging
import sys
import threading
from collections.abc import Iterator

import pytest
from celery.utils.log import LoggingProxy

from jobs.conf import RunLogConf
from jobs.process import logcontext
from jobs.runlog.capture import capturing
from jobs.runlog.lines import Line, Lines
from jobs.runlog.writer import Writer
from jobs.values.redaction import MASK

CONF = RunLogConf(level=logging.INFO, max_lines=100, max_line_chars=1000, flush_seconds=1.0)
log = logging.getLogger("tests.capture")


class HeldWriter(Writer):
    """Keeps each run's lines in memory instead of writing them."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: dict[int, list[Line]] = {}
        self.opened: dict[int, Lines] = {}

    def open(self, run_id: int, lines: Lines, period: float) -> None:
        self.opened[run_id] = lines

    def close(self, run_id: int) -> bool:
        self.kept.setdefault(run_id, []).extend(self.opened.pop(run_id).take().lines)
        return True

    def messages(self, run_id: int) -> list[tuple[str, str]]:
        return [(line.level, line.message) for line in self.kept[run_id]]


@pytest.fixture
def writer() -> HeldWriter:
    return HeldWriter()


@pytest.fixture(autouse=True)
def root_at_info() -> Iterator[None]:
    root = logging.getLogger()
    before = root.level
    root.setLevel(logging.INFO)
    yield
    root.setLevel(before)


def test_records_at_the_level_and_above_are_kept_with_time_and_level(writer: HeldWriter) -> None:
    with capturing(1, conf=CONF, writer=writer):
        log.debug("not kept")
        log.info("kept %s", "info")
        log.error("kept error")
    log.info("after the run: not kept")

    assert writer.messages(1) == [("INFO", "kept info"), ("ERROR", "kept error")]
    assert all(line.at > 0 for line in writer.kept[1])


def test_a_jobs_own_lower_level_lowers_the_root_for_the_run_only(writer: HeldWriter) -> None:
    root = logging.getLogger()
    console = logging.StreamHandler(io.StringIO())
    root.addHandler(console)
    try:
        with capturing(1, logging.DEBUG, conf=CONF, writer=writer):
            log.debug("a debug line")
        assert root.level == logging.INFO and console.level == logging.NOTSET
    finally:
        root.removeHandler(console)
    assert writer.messages(1) == [("DEBUG", "a debug line")]
    stream = console.stream
    assert isinstance(stream, io.StringIO) and "a debug line" not in stream.getvalue()


def test_printed_lines_are_kept_and_still_printed(
    writer: HeldWriter, capsys: pytest.CaptureFixture[str]
) -> None:
    with capturing(1, conf=CONF, writer=writer):
        print("to stdout")
        print("to stderr", file=sys.stderr)
        sys.stdout.write("two\nlines and a rest")

    assert writer.messages(1) == [
        ("STDOUT", "to stdout"),
        ("STDERR", "to stderr"),
        ("STDOUT", "two"),
        ("STDOUT", "lines and a rest"),
    ]
    printed = capsys.readouterr()
    assert printed.out == "to stdout\ntwo\nlines and a rest" and printed.err == "to stderr\n"


def test_streams_celery_redirects_into_a_logger_are_kept_once(writer: HeldWriter) -> None:
    out, err = sys.stdout, sys.stderr
    redirected = logging.getLogger("celery.redirected")
    sys.stdout = LoggingProxy(redirected, logging.WARNING)
    try:
        with capturing(1, conf=CONF, writer=writer):
            print("printed under celery")
    finally:
        sys.stdout, sys.stderr = out, err
    assert writer.messages(1) == [("STDOUT", "printed under celery")]


def test_the_streams_are_given_back_after_the_run_even_when_it_raises(writer: HeldWriter) -> None:
    out, err = sys.stdout, sys.stderr
    with pytest.raises(RuntimeError), capturing(1, conf=CONF, writer=writer):
        raise RuntimeError("the job failed")
    assert (sys.stdout, sys.stderr) == (out, err)
    assert not any(type(h).__name__ == "RunLogHandler" for h in logging.getLogger().handlers)


def test_secrets_are_redacted_and_tracebacks_kept(writer: HeldWriter) -> None:
    with capturing(1, conf=CONF, writer=writer):
        log.info("using amqp://user:s3cret@mq:5672//")
        try:
            raise ValueError("inside")
        except ValueError:
            log.exception("failed")
    (_, redacted), (level, failed) = writer.messages(1)
    assert redacted == f"using amqp://user:{MASK}@mq:5672//" and "s3cret" not in redacted
    assert level == "ERROR" and failed.startswith("failed\nTraceback")
    assert failed.endswith("ValueError: inside")


def test_another_runs_records_are_not_this_runs(writer: HeldWriter) -> None:
    def other_run() -> None:
        with logcontext.run_context(run_id=2):
            log.info("run 2's line")

    with capturing(1, conf=CONF, writer=writer), logcontext.run_context(run_id=1):
        log.info("run 1's line")
        thread = threading.Thread(target=other_run)
        thread.start()
        thread.join()
        # A thread the job starts carries no run: its lines are the run's.
        helper = threading.Thread(target=log.info, args=("a helper thread's line",))
        helper.start()
        helper.join()
    assert writer.messages(1) == [("INFO", "run 1's line"), ("INFO", "a helper thread's line")]


def test_with_run_logs_off_nothing_is_captured(writer: HeldWriter) -> None:
    off = RunLogConf(enabled=False)
    out = sys.stdout
    with capturing(1, conf=off, writer=writer) as lines:
        assert lines is None and sys.stdout is out
        log.info("not kept")
    assert writer.opened == {} and writer.kept == {}
