"""A job's duration history with its baseline band, drawn as inline SVG for its admin page (as
the dashboard's chart: no script, no library).

One dot per recent run, oldest on the left, coloured by status (a run still running: a hollow
dot at its age now); the band from the baseline's median to its p95; a dashed line where a run
becomes running long and one under which a success is too short (jobs.alerts.baseline).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from jobs.alerts import detect
from jobs.alerts.baseline import Baseline, Limit, long_run_limit, short_threshold
from jobs.models import Job, JobRun, RunStatus
from jobs.web.dashboard import STATUS_COLOURS

# The runs drawn: enough to see the baseline's last SAMPLES successes and what came before.
HISTORY = 60

_WIDTH, _HEIGHT = 900, 200
_LEFT, _RIGHT, _TOP, _BOTTOM = 52, 20, 10, 20
_BAND, _LONG, _SHORT = "#c8e6c9", "#c62828", "#ef6c00"


@dataclass(frozen=True)
class Point:
    """One run: its id, status, start and how long it ran (or has been running) in seconds."""

    run_id: int
    status: str
    started_at: datetime
    seconds: float


@dataclass(frozen=True)
class DurationView:
    """What the chart draws: the points, the baseline and the two limits it gives."""

    points: Sequence[Point]
    baseline: Baseline | None
    long: Limit | None
    short: Limit | None


def duration_view(job: Job, now: datetime) -> DurationView:
    """``job``'s last ``HISTORY`` runs that started, with its baseline and limits; ``now`` is
    the clock the ages of running runs are counted by."""
    runs = (
        JobRun.objects.filter(job=job, started_at__isnull=False)
        .exclude(status=RunStatus.SCHEDULED)
        .order_by("-scheduled_for", "-id")
        .only("id", "status", "started_at", "finished_at")[:HISTORY]
    )
    points = []
    for run in reversed(list(runs)):
        assert run.started_at is not None
        end = run.finished_at or now
        seconds = max((end - run.started_at).total_seconds(), 0.0)
        points.append(Point(run.pk, run.status, run.started_at, seconds))
    rules, known = detect.duration_rules(job), detect.baseline_of(job)
    return DurationView(points, known, long_run_limit(rules, known), short_threshold(rules, known))


def nice_ticks(peak: float, most: int = 5) -> list[float]:
    """The y-axis: 0 up to ``peak`` (above 0) in at most ``most`` steps of 1, 2 or 5 times a
    power of ten, the first multiple at or above ``peak`` on top."""
    peak = max(peak, 1e-3)
    magnitude = 10.0 ** math.floor(math.log10(peak / most))
    while True:
        for multiple in (1, 2, 5):
            step = multiple * magnitude
            steps = max(1, math.ceil(peak / step - 1e-9))
            if steps <= most:
                return [round(step * i, 6) for i in range(steps + 1)]
        magnitude *= 10


def seconds_words(seconds: float) -> str:
    """A duration for a label: ``250 ms``, ``1.5 s``, ``90 s``."""
    if seconds == 0:
        return "0"
    if seconds < 1:
        return f"{seconds * 1000:.3g} ms"
    return f"{seconds:.3g} s" if seconds < 1000 else f"{seconds:.0f} s"


def chart_svg(view: DurationView) -> SafeString:
    """The chart of ``view``; says so in words when there is nothing to draw."""
    if not view.points:
        return mark_safe('<p class="duration-chart-empty">No run has started yet.</p>')
    plot_w, plot_h = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM
    drawn = [p.seconds for p in view.points]
    if view.baseline is not None:
        drawn.append(view.baseline.p95)
    if view.long is not None:
        drawn.append(view.long.seconds)
    ticks = nice_ticks(max(drawn))
    top = ticks[-1]

    def y(seconds: float) -> float:
        return _TOP + plot_h * (1 - min(seconds, top) / top)

    parts = [
        f'<svg class="duration-chart" role="img" viewBox="0 0 {_WIDTH} {_HEIGHT}" width="100%" '
        'xmlns="http://www.w3.org/2000/svg" font-size="11" font-family="sans-serif">'
        "<title>Durations of the job's last runs, with its baseline band</title>"
    ]
    for value in ticks:
        parts.append(
            f'<line x1="{_LEFT}" x2="{_LEFT + plot_w}" y1="{y(value):.1f}" y2="{y(value):.1f}" '
            'stroke="#ddd" stroke-width="1"/>'
            f'<text class="y-tick" x="{_LEFT - 4}" y="{y(value) + 4:.1f}" text-anchor="end" '
            f'fill="#666">{seconds_words(value)}</text>'
        )
    if view.baseline is not None:
        low, high = y(view.baseline.median), y(view.baseline.p95)
        parts.append(
            f'<rect class="baseline-band" x="{_LEFT}" y="{high:.1f}" width="{plot_w}" '
            f'height="{max(low - high, 1.0):.1f}" fill="{_BAND}" opacity="0.8">'
            f"<title>baseline: median {seconds_words(view.baseline.median)} to p95 "
            f"{seconds_words(view.baseline.p95)} of its last {view.baseline.samples} "
            "successes</title></rect>"
        )
    for css, limit, colour, words in (
        ("long-run-limit", view.long, _LONG, "running long past"),
        ("short-threshold", view.short, _SHORT, "too short under"),
    ):
        if limit is not None:
            parts.append(
                f'<line class="{css}" x1="{_LEFT}" x2="{_LEFT + plot_w}" '
                f'y1="{y(limit.seconds):.1f}" y2="{y(limit.seconds):.1f}" stroke="{colour}" '
                f'stroke-width="1.5" stroke-dasharray="6 4"><title>{words} '
                f"{seconds_words(limit.seconds)}: {escape(limit.basis)}</title></line>"
            )
    step = plot_w / len(view.points)
    for index, point in enumerate(view.points):
        colour = STATUS_COLOURS.get(point.status, "#616161")
        running = point.status == RunStatus.RUNNING
        fill = f'fill="white" stroke="{colour}" stroke-width="2"' if running else f'fill="{colour}"'
        parts.append(
            f'<circle class="run status-{escape(point.status)}" '
            f'cx="{_LEFT + step * (index + 0.5):.1f}" cy="{y(point.seconds):.1f}" r="3.5" '
            f"{fill}><title>run {point.run_id}, {point.started_at:%Y-%m-%d %H:%M:%S} UTC: "
            f"{seconds_words(point.seconds)}{' so far' if running else ''}, "
            f"{escape(point.status)}</title></circle>"
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # numbers and escaped words only


def caption(view: DurationView) -> str:
    """The chart's rules in words, for the page beside it (and whoever cannot see it)."""
    known = view.baseline
    words = [
        f"baseline: median {seconds_words(known.median)}, p95 {seconds_words(known.p95)} of "
        f"its last {known.samples} successes"
        if known is not None
        else "no baseline yet (too few successes)"
    ]
    if view.long is not None:
        words.append(f"running long past {seconds_words(view.long.seconds)} ({view.long.basis})")
    if view.short is not None:
        words.append(f"too short under {seconds_words(view.short.seconds)} ({view.short.basis})")
    return "; ".join(words)
