"""A job's duration chart (jobs.web.duration_chart): its axis, its band and limits, its dots
and their words, with no script and nothing unescaped."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from jobs.alerts.baseline import Baseline, Limit
from jobs.web.duration_chart import (
    DurationView,
    Point,
    caption,
    chart_svg,
    nice_ticks,
    seconds_words,
)

AT = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("peak", "ticks"),
    [
        (10.0, [0, 2, 4, 6, 8, 10]),
        (5.5, [0, 2, 4, 6]),
        (0.023, [0, 0.005, 0.01, 0.015, 0.02, 0.025]),
        (1.0, [0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        (0.0, [0, 0.0002, 0.0004, 0.0006, 0.0008, 0.001]),
    ],
)
def test_nice_ticks(peak: float, ticks: list[float]) -> None:
    assert nice_ticks(peak) == pytest.approx(ticks)


@pytest.mark.parametrize(
    ("seconds", "words"), [(0, "0"), (0.25, "250 ms"), (1.5, "1.5 s"), (90, "90 s")]
)
def test_seconds_words(seconds: float, words: str) -> None:
    assert seconds_words(seconds) == words


def _view() -> DurationView:
    points = [Point(i, "succeeded", AT, 1.0) for i in range(1, 11)]
    points += [Point(11, "succeeded", AT, 0.01), Point(12, "running", AT, 7.0)]
    return DurationView(
        points,
        Baseline(10, 1.0, 1.2),
        Limit(5.0, "3 x its baseline <p95>"),
        Limit(0.1, "0.1 x its baseline"),
    )


def test_the_chart_draws_a_dot_per_run_the_band_and_both_limits() -> None:
    svg = str(chart_svg(_view()))
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "<script" not in svg and "http://www.w3.org/2000/svg" in svg
    assert len(re.findall(r"<circle class=\"run ", svg)) == 12
    assert svg.count('class="baseline-band"') == 1
    assert 'class="long-run-limit"' in svg and 'class="short-threshold"' in svg
    assert "3 x its baseline &lt;p95&gt;" in svg  # the basis escaped
    assert "run 12, 2030-01-01 12:00:00 UTC: 7 s so far, running" in svg
    assert 'fill="white" stroke=' in svg  # the running run: hollow


def test_the_chart_without_runs_says_so_and_without_a_baseline_has_no_band() -> None:
    assert "No run has started yet." in chart_svg(DurationView([], None, None, None))
    svg = str(chart_svg(DurationView([Point(1, "failed", AT, 2.0)], None, None, None)))
    assert "baseline-band" not in svg and "long-run-limit" not in svg
    assert svg.count("<circle") == 1


def test_the_caption_says_the_rules() -> None:
    assert caption(_view()) == (
        "baseline: median 1 s, p95 1.2 s of its last 10 successes; running long past 5 s "
        "(3 x its baseline <p95>); too short under 100 ms (0.1 x its baseline)"
    )
    assert caption(DurationView([], None, None, None)) == "no baseline yet (too few successes)"
