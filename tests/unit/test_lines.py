"""A run's lines before they are written (jobs.runlog.lines): numbered, redacted, cut to length,
and bounded in memory to the first and last lines, with the range of written lines to delete."""

from __future__ import annotations

import logging
import tracemalloc

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from jobs.conf import RunLogConf, get_run_log_conf
from jobs.runlog.lines import Batch, Lines, level_number, storable
from jobs.values.redaction import MASK


def _lines(head: int = 3, tail: int = 2, max_chars: int = 100) -> Lines:
    return Lines(head=head, tail=tail, max_chars=max_chars)


def _seqs(batch: Batch) -> list[int]:
    return [line.seq for line in batch.lines]


def test_lines_are_numbered_from_one_in_order_and_taken_once() -> None:
    lines = _lines()
    for number in range(3):
        lines.add("INFO", f"line {number}", 0.0)

    first = lines.take()

    assert _seqs(first) == [1, 2, 3]
    assert [line.message for line in first.lines] == ["line 0", "line 1", "line 2"]
    assert not lines.take()  # nothing new


def test_past_the_bounds_the_first_and_last_lines_are_kept_in_memory_too() -> None:
    lines = _lines(head=3, tail=2)
    for number in range(1_000):
        lines.add("INFO", f"line {number + 1}", 0.0)

    batch = lines.take()

    assert _seqs(batch) == [1, 2, 3, 999, 1000]
    assert (batch.cut_after, batch.cut_through) == (3, 998)


def test_each_write_asks_to_delete_only_the_written_lines_the_bounds_cut_since() -> None:
    lines = _lines(head=3, tail=2)
    for _ in range(5):
        lines.add("INFO", "x", 0.0)
    assert (lines.take().cut_through, _seqs(lines.take())) == (0, [])  # 1..5: all kept so far

    lines.add("INFO", "x", 0.0)  # 6: line 4 falls out of the last two
    batch = lines.take()
    assert _seqs(batch) == [6]
    assert (batch.cut_after, batch.cut_through) == (3, 4)

    lines.add("INFO", "x", 0.0)
    lines.add("INFO", "x", 0.0)  # 8: 5 and 6 go
    batch = lines.take()
    assert _seqs(batch) == [7, 8]
    assert (batch.cut_after, batch.cut_through) == (4, 6)


def test_many_lines_waiting_ask_the_writer_to_come_early() -> None:
    lines = _lines(head=1_000, tail=1_000)
    asks = [lines.add("INFO", "x", 0.0) for _ in range(600)]
    assert not any(asks[:499]) and all(asks[499:])


def test_a_line_is_redacted_then_cut_to_length_saying_how_much_went() -> None:
    assert storable("to redis://:hunter2@db:6379/0 now", 100) == f"to redis://:{MASK}@db:6379/0 now"
    assert storable("x" * 150, 100) == "x" * 100 + " [50 more characters cut]"


def test_what_postgresql_text_cannot_hold_is_escaped() -> None:
    assert storable("a\x00b", 100) == "a\\x00b"
    assert storable("bad \udcff surrogate", 100) == "bad \\udcff surrogate"


def test_levels_are_named_as_logging_names_them() -> None:
    assert level_number("debug") == logging.DEBUG
    assert level_number(" WARNING ") == logging.WARNING
    with pytest.raises(ValueError, match="DEBUG, INFO, WARNING, ERROR, CRITICAL"):
        level_number("LOUD")


def test_a_great_many_lines_cost_the_memory_of_the_bounds() -> None:
    lines = _lines(head=50, tail=50, max_chars=200)
    tracemalloc.start()
    try:
        for number in range(200_000):
            lines.add("INFO", f"line {number} " + "x" * 100, 0.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert lines.count == 200_000
    assert peak < 1_000_000, f"{peak} bytes at the peak"  # all of them would be ~30 MB
    batch = lines.take()
    assert len(batch.lines) == 100 and batch.lines[-1].seq == 200_000


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_lines": 1}, "JOBS_RUN_LOG_MAX_LINES must be at least 2"),
        ({"max_line_chars": 10}, "JOBS_RUN_LOG_MAX_LINE_CHARS must be at least 80"),
        ({"flush_seconds": 0}, "JOBS_RUN_LOG_FLUSH_SECONDS must be positive"),
    ],
)
def test_the_bounds_are_validated_naming_the_variable(
    fields: dict[str, float], message: str
) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        RunLogConf(**fields)  # type: ignore[arg-type]


def test_the_configured_level_is_validated_naming_the_variable() -> None:
    get_run_log_conf.cache_clear()
    try:
        with (
            override_settings(JOBS_RUN_LOG_LEVEL="LOUD"),
            pytest.raises(ImproperlyConfigured, match="JOBS_RUN_LOG_LEVEL='LOUD': not a log level"),
        ):
            get_run_log_conf()
    finally:
        get_run_log_conf.cache_clear()
    assert RunLogConf().head_lines == 1000 and RunLogConf(max_lines=5).tail_lines == 3
