"""Structured logs: the run fields reach every record logged during a run, and the JSON
formatter prints one parseable object per line."""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime

import pytest

from jobs.process import logcontext


@pytest.fixture
def lines() -> list[str]:
    return []


@pytest.fixture
def logger(lines: list[str]) -> logging.Logger:
    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = Collect()
    handler.setFormatter(logcontext.JsonFormatter())
    handler.addFilter(logcontext.RunContextFilter())
    log = logging.getLogger("tests.logcontext")
    log.handlers = [handler]
    log.propagate = False
    log.setLevel(logging.INFO)
    return log


def records(lines: list[str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in lines]


def test_every_line_of_a_run_carries_its_fields(logger: logging.Logger, lines: list[str]) -> None:
    slot = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)

    @logcontext.bound_run
    def execute_run(run_id: int, *, task_id: str, node: str) -> None:
        logger.info("claimed")
        logcontext.bind(job="billing.close_day", slot=slot)
        logger.info("leasing")
        logcontext.bind(token=7)
        logger.warning("job says %s", "hello", extra={"action": "custom"})

    execute_run(42, task_id="jobrun-42", node="w1@h")
    logger.info("after the run")

    first, second, third, after = records(lines)
    assert (first["run_id"], first["node"]) == (42, "w1@h") and "job" not in first
    assert (second["job"], second["slot"]) == ("billing.close_day", "2030-01-01T09:00:00+00:00")
    assert third["token"] == 7 and third["message"] == "job says hello"
    assert third["action"] == "custom" and third["level"] == "WARNING"
    assert "run_id" not in after


def test_extra_given_at_the_call_wins(logger: logging.Logger, lines: list[str]) -> None:
    with logcontext.run_context(run_id=1, node="a"):
        logger.info("x", extra={"node": "explicit"})

    assert records(lines)[0]["node"] == "explicit"


def test_bind_outside_a_run_does_nothing(logger: logging.Logger, lines: list[str]) -> None:
    logcontext.bind(job="stray")
    logger.info("no run")

    assert "job" not in records(lines)[0]
    assert logcontext.current() == {}


def test_runs_in_threads_do_not_mix(logger: logging.Logger, lines: list[str]) -> None:
    start = threading.Barrier(2)

    def run(run_id: int) -> None:
        with logcontext.run_context(run_id=run_id):
            start.wait()
            logger.info("in %s", run_id)

    threads = [threading.Thread(target=run, args=(n,)) for n in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert {(r["message"], r["run_id"]) for r in records(lines)} == {("in 1", 1), ("in 2", 2)}


def test_exceptions_and_odd_values_still_make_one_json_line(
    logger: logging.Logger, lines: list[str]
) -> None:
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        logger.exception("failed", extra={"things": {1: object()}, "ratio": 0.5})

    (line,) = lines
    assert "\n" not in line
    record = json.loads(line)
    assert "ValueError: boom" in record["exception"]
    assert record["ratio"] == 0.5 and list(record["things"]) == ["1"]
