"""A job's duration baseline (jobs.alerts.baseline): its median and p95, too few runs for one,
and the limits it gives: running long (with its floor) and too short."""

from __future__ import annotations

import pytest

from jobs.alerts.baseline import (
    LIMIT_GRACE,
    LONG_RUN_FLOOR,
    MIN_SAMPLES,
    SHORT_MIN_SAMPLES,
    Baseline,
    DurationRules,
    long_run_limit,
    percentile,
    short_threshold,
    too_short,
)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([30, 31, 32, 33, 34], 0.95, 33.8),  # as PostgreSQL's percentile_cont says
        ([30, 31, 32, 33, 34], 0.5, 32.0),
        ([4, 1, 3, 2], 0.5, 2.5),  # an even count: between the middle two, in any order
        ([7.0], 0.95, 7.0),
        ([1, 1, 1, 100], 0.95, pytest.approx(85.15)),
    ],
)
def test_percentile_interpolates_between_the_closest_ranks(
    values: list[float], q: float, expected: float
) -> None:
    assert percentile(values, q) == expected


def test_a_baseline_is_the_median_and_p95_of_enough_durations() -> None:
    known = Baseline.of([1.0, 1.2, 0.8, 1.1, 0.9])
    assert known is not None
    assert (known.samples, known.median, known.p95) == (5, 1.0, pytest.approx(1.18))
    assert Baseline.of([1.0] * (MIN_SAMPLES - 1)) is None  # too few runs: no baseline
    assert Baseline.of([]) is None


ONE_SECOND = Baseline(20, 1.0, 1.2)


@pytest.mark.parametrize(
    ("rules", "known", "expected"),
    [
        (DurationRules(), None, None),  # no limit, no baseline: no basis to say
        (DurationRules(time_limit=10), None, 10 + LIMIT_GRACE),
        # Short jobs too: 3 x 1.2 s is under the floor, which is far under the old 60 s.
        (DurationRules(), ONE_SECOND, LONG_RUN_FLOOR),
        (DurationRules(), Baseline(20, 30.0, 100.0), 300.0),
        (DurationRules(long_run_factor=1.5), Baseline(20, 30.0, 100.0), 150.0),
        # The sooner of the time limit and the baseline.
        (DurationRules(time_limit=600), Baseline(20, 30.0, 100.0), 300.0),
        (DurationRules(time_limit=60), Baseline(20, 30.0, 100.0), 60 + LIMIT_GRACE),
        # A declared maximum decides alone.
        (DurationRules(time_limit=10, max_duration=2), ONE_SECOND, 2.0),
        # The baseline switched off: the time limit only.
        (DurationRules(baseline_alerts=False), ONE_SECOND, None),
        (DurationRules(time_limit=10, baseline_alerts=False), ONE_SECOND, 10 + LIMIT_GRACE),
    ],
)
def test_the_long_run_limit(
    rules: DurationRules, known: Baseline | None, expected: float | None
) -> None:
    limit = long_run_limit(rules, known)
    assert (None if limit is None else limit.seconds) == expected


def test_the_long_run_limit_says_its_basis() -> None:
    limit = long_run_limit(DurationRules(), Baseline(20, 30.0, 100.0))
    assert limit is not None
    assert limit.basis == "3 x its baseline (p95 100.0 s of its last 20 successes), at least 5 s"


@pytest.mark.parametrize(
    ("rules", "known", "duration", "short"),
    [
        (DurationRules(), ONE_SECOND, 0.01, True),  # the 10 ms success of a 1 s job
        (DurationRules(), ONE_SECOND, 0.2, False),  # fast, but not a tenth of its median
        (DurationRules(), Baseline(SHORT_MIN_SAMPLES - 1, 1.0, 1.2), 0.01, False),  # too few
        # A job of milliseconds: its jitter is its duration, never too short by its baseline.
        (DurationRules(), Baseline(20, 0.4, 0.5), 0.001, False),
        (DurationRules(baseline_alerts=False), ONE_SECOND, 0.01, False),
        # The declared minimum: the job that did nothing, baseline or not.
        (DurationRules(min_duration=5), None, 4.9, True),
        (DurationRules(min_duration=5), None, 5.0, False),
        (DurationRules(min_duration=5, baseline_alerts=False), ONE_SECOND, 2, True),
    ],
)
def test_too_short(
    rules: DurationRules, known: Baseline | None, duration: float, short: bool
) -> None:
    assert (too_short(rules, known, duration) is not None) is short


def test_the_short_threshold_is_the_higher_of_the_minimum_and_the_baseline() -> None:
    known = Baseline(20, 100.0, 120.0)
    threshold = short_threshold(DurationRules(min_duration=5), known)
    assert threshold is not None
    assert threshold.seconds == 10.0
    assert threshold.basis == "0.1 x its baseline (median 100.00 s of its last 20 successes)"
    assert short_threshold(DurationRules(), None) is None
