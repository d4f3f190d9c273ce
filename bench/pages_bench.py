"""Operator pages and reads at a large run table.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/jobs \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/4 \\
        .venv/bin/python -m bench.pages_bench [--runs 1000000] [--rounds 20]

It works in its own database, ``<DATABASE_URL's database>_pages_bench`` (created afresh and
filled in SQL: ``--runs`` runs over 100 jobs and 30 days, 90% succeeded, the rest failed, lost,
skipped or missed, over 20 nodes; already folded into the metric roll-ups, as in a cluster whose
maintenance keeps up), dropped at the end unless ``--keep``. Each page is fetched ``--rounds``
times through Django's test client as a logged-in superuser (the API and /metrics with a token),
beside the floor of a bare ``SELECT`` of the 50 newest runs: median and p99 milliseconds. The
run claim and fenced finish are timed on this table too, for comparison with
``bench/lease_bench.py`` on an empty one.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from bench.databases import django_on_fresh_database
from bench.measure import percentile

JOBS = 100
DAYS = 30

_FILL = """
INSERT INTO jobs_jobrun (job_id, scheduled_for, trigger, status, attempt, node, pid,
                         started_at, finished_at, fencing_token, lease_key, error, folded)
SELECT j.id, s.slot, 'scheduled', s.status, 1, 'node-' || (s.i %% 20), 1000 + s.i %% 50,
       s.slot + interval '20 ms', s.slot + interval '1 s', s.i, 'job:' || j.name,
       CASE WHEN s.status = 'failed' THEN 'RuntimeError: boom' ELSE '' END, true
  FROM (SELECT i, now() - make_interval(secs => i * %(spacing)s) AS slot,
               CASE WHEN i / 7 %% 100 < 90 THEN 'succeeded' WHEN i / 7 %% 100 < 95 THEN 'failed'
                    WHEN i / 7 %% 100 < 97 THEN 'skipped' WHEN i / 7 %% 100 < 99 THEN 'missed'
                    ELSE 'lost' END AS status
          FROM generate_series(1, %(runs)s) AS i) AS s
  JOIN (SELECT id, name, row_number() OVER (ORDER BY id) - 1 AS n FROM jobs_job) AS j
    ON j.n = s.i %% %(jobs)s
"""


def _timed(rounds: int, once: Callable[[], object]) -> list[float]:
    once()  # warm: the first fetch pays for imports and plans
    timings = []
    for _ in range(rounds):
        started = time.perf_counter()
        once()
        timings.append((time.perf_counter() - started) * 1000)
    return timings


def _fill(runs: int) -> None:
    from django.db import connection, transaction

    from jobs.audit import Actor
    from jobs.schedule.kinds import Every
    from jobs.services import JobDefinition, create_job

    for n in range(JOBS):
        create_job(
            JobDefinition(name=f"bench.job-{n:03d}", task="bench.noop", schedule=Every(3600)),
            actor=Actor.code("bench"),
        )
    spacing = DAYS * 86400 / runs
    started = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        # Rows as a restore writes them: without the run table's triggers, whose per-run work
        # (alerts on failed runs, downstream runs) is the live system's, not what a page reads,
        # and which at ten million rows in one transaction take longer than the fill itself.
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(_FILL, {"runs": runs, "spacing": spacing, "jobs": JOBS})
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_jobrun")
    print(f"filled {runs:,} runs in {time.perf_counter() - started:.0f} s", flush=True)


def measure(rounds: int) -> dict[str, list[float]]:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.utils import timezone

    from jobs.audit import Actor
    from jobs.guard import run_records
    from jobs.models import Job, JobRun, RunStatus, Trigger
    from jobs.web import tokens

    admin = User.objects.create_superuser("bench", "bench@example.com", "bench-unused-9")
    client = Client(SERVER_NAME="localhost")
    client.force_login(admin)
    secret = tokens.create("bench", actor=Actor.code("bench"))[1]
    api = Client(SERVER_NAME="localhost", headers={"authorization": f"Bearer {secret}"})
    job = Job.objects.order_by("id").first()
    assert job is not None

    def get(which: Client, url: str) -> Callable[[], object]:
        def fetch() -> object:
            response = which.get(url)
            assert response.status_code == 200, (url, response.status_code)
            return response

        return fetch

    def floor() -> object:
        with connection.cursor() as cursor:
            cursor.execute("SELECT * FROM jobs_jobrun ORDER BY scheduled_for DESC LIMIT 50")
            return cursor.fetchall()

    pages: dict[str, Callable[[], object]] = {
        "floor: SELECT the 50 newest runs": floor,
        "admin: job list": get(client, "/admin/jobs/job/"),
        "admin: run list": get(client, "/admin/jobs/jobrun/"),
        "admin: run list, failed of one job": get(
            client, f"/admin/jobs/jobrun/?status__exact=failed&job__id__exact={job.pk}"
        ),
        "admin: a job's page": get(client, f"/admin/jobs/job/{job.pk}/change/"),
        "admin: dashboard": get(client, "/admin/jobs/dashboard/"),
        "API: runs, newest 50": get(api, "/api/runs?limit=50"),
        "API: runs of a job, failed": get(api, f"/api/runs?job={job.name}&status=failed"),
        "API: a job's runs, page 100": get(api, f"/api/jobs/{job.name}/runs?limit=50&offset=5000"),
        "/metrics": get(api, "/metrics"),
    }
    results = {}
    for name, fetch in pages.items():
        results[name] = _timed(rounds, fetch)
        print(f"  {name}: {statistics.median(results[name]):.1f} ms", flush=True)

    # A run's two statements on this table (the claim also takes the lease).
    claims, finishes = [], []
    for _ in range(rounds * 5):
        run = JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.MANUAL)
        started = time.perf_counter()
        claim = run_records.claim(run.pk, node="bench", pid=1, task_id="t", holder="bench:1")
        claims.append((time.perf_counter() - started) * 1000)
        assert claim is not None and claim.lease is not None
        started = time.perf_counter()
        run_records.finish_fenced(
            run.pk, key=claim.lease.key, token=claim.lease.token, status=RunStatus.SUCCEEDED
        )
        finishes.append((time.perf_counter() - started) * 1000)
    results["run claim + lease acquire"] = claims
    results["run finish + lease release"] = finishes
    return results


def table(results: dict[str, list[float]], runs: int) -> str:
    floor = statistics.median(results["floor: SELECT the 50 newest runs"])
    lines = [
        f"| at {runs:,} runs | median ms | p99 ms | vs floor |",
        "| --- | --- | --- | --- |",
    ]
    for name, values in results.items():
        median = statistics.median(values)
        lines.append(
            f"| {name} | {median:.1f} | {percentile(values, 99):.1f} | {median / floor:.1f}x |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pages_bench")
    parser.add_argument("--runs", type=int, default=1_000_000, help="rows in the run table")
    parser.add_argument("--rounds", type=int, default=20, help="fetches per page")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    args = parser.parse_args(argv)

    with django_on_fresh_database("_pages_bench", "bench.pages_jobs", keep=args.keep):
        _fill(args.runs)
        print(f"{args.rounds} fetches per page...", flush=True)
        results = measure(args.rounds)
    print()
    print(table(results, args.runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
