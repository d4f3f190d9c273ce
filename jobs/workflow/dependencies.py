"""Dependencies: a job runs after others. When every upstream of a job has succeeded for a slot,
the job gets one run for that slot (trigger ``upstream``); when an upstream's run for it ends
otherwise and is not retried, the job's record of the slot says which run and why (``skipped``).

The rule is one deferred trigger on the run table (jobs/sql/dependencies.sql), so it holds however
a run ends; this module defines the graph (no cycles) and publishes the runs a finish made.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from django.core.exceptions import ValidationError
from django.db import connection

from jobs.broker.dispatch import publish_many
from jobs.guard import after_finish
from jobs.guard.run_records import Claim, NewRun
from jobs.models import Job, JobKind

log = logging.getLogger(__name__)


def check_upstreams(job: Job, names: Sequence[str]) -> list[Job]:
    """The jobs named as ``job``'s upstreams; ``ValidationError`` on ``after`` for an unknown
    or continuous job, the job itself, or a cycle (naming it)."""
    wanted = list(dict.fromkeys(names))
    found = {j.name: j for j in Job.objects.filter(name__in=wanted)}
    problems = [f"no job named {name!r}" for name in wanted if name not in found]
    problems += [
        f"{name!r} is a continuous job: it has no runs that end"
        for name, upstream in found.items()
        if upstream.kind == JobKind.CONTINUOUS
    ]
    if job.kind == JobKind.CONTINUOUS and wanted:
        problems.append("a continuous job cannot run after others: it always runs")
    if job.name in wanted:
        problems.append("a job cannot run after itself")
    if not problems and job.pk is not None:
        cycle = _cycle_through(job, [found[name] for name in wanted])
        if cycle:
            problems.append(f"that would make a cycle: {' → '.join(cycle)}")
    if problems:
        raise ValidationError({"after": problems})
    return [found[name] for name in wanted]


def _cycle_through(job: Job, upstreams: Iterable[Job]) -> list[str]:
    """The path job → … → job that these new upstreams would close, if any: a cycle exists when
    ``job`` is already upstream of one of them (a downstream reaches itself)."""
    edges: dict[int, list[int]] = {}
    for downstream_id, upstream_id in Job.upstreams.through.objects.values_list(
        "from_job_id", "to_job_id"
    ):
        edges.setdefault(upstream_id, []).append(downstream_id)  # upstream -> downstreams
    names = dict(Job.objects.values_list("id", "name"))
    for upstream in upstreams:
        # Is `upstream` reachable downstream of `job`? Then job -> ... -> upstream -> job.
        path = _path(edges, job.pk, upstream.pk)
        if path:
            return [names[node] for node in path] + [job.name]
    return []


def _path(edges: dict[int, list[int]], start: int, goal: int) -> list[int]:
    stack: list[tuple[int, list[int]]] = [(start, [start])]
    seen = set()
    while stack:
        node, path = stack.pop()
        if node == goal:
            return path
        if node in seen:
            continue
        seen.add(node)
        stack.extend((nxt, [*path, nxt]) for nxt in edges.get(node, []))
    return []


# The runs that a finish made for downstream jobs (the trigger of jobs/sql/dependencies.sql), not
# yet sent:
# stamped and returned for publishing, once, whoever asks.
_TAKE_MADE_BY = """
UPDATE jobs_jobrun SET dispatched_at = now()
 WHERE upstream_run_id = %s AND trigger = 'upstream' AND status IS NOT DISTINCT FROM 'scheduled'
   AND dispatched_at IS NULL
RETURNING id, job_id, scheduled_for
"""


def publish_runs_made_by(run_id: int) -> int:
    """Publish the downstream runs that run ``run_id``'s end made; a lost publish is
    maintenance's to repeat (they are never-sent runs)."""
    with connection.cursor() as cursor:
        cursor.execute(_TAKE_MADE_BY, [run_id])
        made = [NewRun(run_id=r[0], job_id=r[1], scheduled_for=r[2]) for r in cursor.fetchall()]
    if not made:
        return 0
    jobs = Job.objects.in_bulk({run.job_id for run in made})
    return publish_many((jobs[run.job_id], run.run_id, run.scheduled_for) for run in made)


def _publish_after_end(claim: Claim) -> None:
    # Out now rather than when maintenance finds them unsent.
    if claim.has_downstreams:
        publish_runs_made_by(claim.run_id)


after_finish.register("publishing the downstream runs", _publish_after_end)
