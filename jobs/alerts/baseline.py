"""A job's duration baseline, and what it says of a run: running long, or too short.

The baseline is the median and the p95 of the job's last ``SAMPLES`` successful durations
(linear interpolation, as PostgreSQL's ``percentile_cont``). It is not stored: maintenance reads
the durations of the few jobs it judges in one query per detection pass
(:data:`jobs.alerts.detect`), so a run's finish writes nothing more, and the baseline is always
exactly the last successes, whatever retention pruned or an operator edited.

A run is **running long** once it is past the first of: the job's ``max_duration`` (which then
alone decides); its time limit (soft, else hard) plus ``LIMIT_GRACE``; ``long_run_factor`` (by
default ``LONG_RUN_FACTOR``) times its p95, with at least ``MIN_SAMPLES`` successes, never
sooner than ``LONG_RUN_FLOOR``. The floor is low enough for a one-second job hanging for
seconds to be noticed, high enough for a job of milliseconds not to be called long over a
database hiccup.

A success is **too short** under the job's ``min_duration``, or, with at least
``SHORT_MIN_SAMPLES`` successes before it, under ``SHORT_FRACTION`` of their median and by at
least ``SHORT_MARGIN`` (a job of a few milliseconds is never too short by its baseline: its
jitter is its duration).

``baseline_alerts`` off: only the declared maximum and minimum and the time limits judge.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

SAMPLES = 20
MIN_SAMPLES = 5
LONG_RUN_FACTOR = 3.0
LONG_RUN_FLOOR = 5.0
LIMIT_GRACE = 5.0
SHORT_MIN_SAMPLES = 10
SHORT_FRACTION = 0.1
SHORT_MARGIN = 0.5


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0 to 1) of ``values`` (not empty), interpolated linearly between the
    closest ranks, as PostgreSQL's ``percentile_cont``."""
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Baseline:
    """The median and p95 of a job's last ``samples`` successful durations, in seconds."""

    samples: int
    median: float
    p95: float

    @classmethod
    def of(cls, durations: Sequence[float]) -> Baseline | None:
        """The baseline of ``durations``; ``None`` for fewer than ``MIN_SAMPLES``."""
        if len(durations) < MIN_SAMPLES:
            return None
        return cls(len(durations), percentile(durations, 0.5), percentile(durations, 0.95))


@dataclass(frozen=True)
class DurationRules:
    """A job's settings for judging its runs' durations (its ``Job`` fields)."""

    time_limit: int | None = None  # the soft limit, else the hard one
    max_duration: int | None = None
    long_run_factor: float | None = None
    min_duration: int | None = None
    baseline_alerts: bool = True

    @property
    def factor(self) -> float:
        return LONG_RUN_FACTOR if self.long_run_factor is None else self.long_run_factor


@dataclass(frozen=True)
class Limit:
    """How long a run may run, and what says so, in words."""

    seconds: float
    basis: str


def long_run_limit(rules: DurationRules, baseline: Baseline | None) -> Limit | None:
    """How long a run of the job may run before it is running long; ``None``: no basis."""
    if rules.max_duration is not None:
        return Limit(float(rules.max_duration), f"its maximum duration of {rules.max_duration} s")
    limits = []
    if rules.time_limit is not None:
        limits.append(
            Limit(rules.time_limit + LIMIT_GRACE, f"its time limit of {rules.time_limit} s")
        )
    if rules.baseline_alerts and baseline is not None:
        limits.append(
            Limit(
                max(LONG_RUN_FLOOR, rules.factor * baseline.p95),
                f"{rules.factor:g} x its baseline (p95 {baseline.p95:.1f} s of its last "
                f"{baseline.samples} successes), at least {LONG_RUN_FLOOR:g} s",
            )
        )
    return min(limits, key=lambda limit: limit.seconds, default=None)


def short_threshold(rules: DurationRules, baseline: Baseline | None) -> Limit | None:
    """The duration under which a success is too short; ``None``: none is."""
    limits = []
    if rules.min_duration is not None:
        limits.append(
            Limit(
                float(rules.min_duration),
                f"its minimum duration of {rules.min_duration} s",
            )
        )
    if rules.baseline_alerts and baseline is not None and baseline.samples >= SHORT_MIN_SAMPLES:
        seconds = min(SHORT_FRACTION * baseline.median, baseline.median - SHORT_MARGIN)
        if seconds > 0:
            limits.append(
                Limit(
                    seconds,
                    f"{SHORT_FRACTION:g} x its baseline (median {baseline.median:.2f} s of its "
                    f"last {baseline.samples} successes)",
                )
            )
    return max(limits, key=lambda limit: limit.seconds, default=None)


def too_short(rules: DurationRules, baseline: Baseline | None, duration: float) -> Limit | None:
    """The threshold a success of ``duration`` seconds fell under; ``None``: not too short."""
    threshold = short_threshold(rules, baseline)
    return threshold if threshold is not None and duration < threshold.seconds else None
