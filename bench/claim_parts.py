"""What each part of the run claim costs the database: pgbench, one client, prepared statements.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/jobs \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/4 \\
        .venv/bin/python -m bench.claim_parts [--runs 3000] [--rounds 3] [--lean-table]

``bench.guard_cost`` says a guarded run's database work is ~0.15 ms above what moving its run
row costs; this says which part of the claim it is. Each script inserts a scheduled run (its
own line, not compared), then makes one statement of the steps below, each adding one part of
``jobs_claim_run`` (migration 0025) to the one before, in PL/pgSQL functions made for the bench:

- for scale, the floor's bare ``UPDATE`` of a one-row table (``lease_bench.FLOOR_UPDATE``);
- the bare ``UPDATE`` of the run row to ``running``, as the claim writes it;
- the same ``UPDATE`` inside a PL/pgSQL function (the function call);
- plus the run and its job read ``FOR UPDATE`` first;
- plus the "has downstreams" probe of the dependency table;
- plus the job's lease taken (``INSERT ... ON CONFLICT DO UPDATE``), given back by a statement
  of its own after it (its line: what a release costs);
- ``jobs_claim_run`` itself (its lease given back likewise), and ``jobs_finish_run`` after it.

Each line of a script commits on its own, as the runner's statements do; the figure is pgbench's
mean latency of the statement (round trip and commit included), the median over ``--rounds``
rounds that alternate the scripts. ``--lean-table`` first disables the run table's deferred
triggers and drops the indexes on its status and node (a diagnosis: the platform needs them),
so that every ``UPDATE`` of it is a HOT update and only the parts differ. It works in its own
database (``<DATABASE_URL's name>_claim_parts``).
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.databases import django_on_fresh_database

JOB = "parts"
# pgbench takes ":name" for a variable, so the lease key's colon is written as chr(58).
KEY = "('job' || chr(58) || 'parts')"
NEW_RUN = (
    "INSERT INTO jobs_jobrun (job_id, scheduled_for, trigger) "
    "VALUES (:job, now(), 'manual') RETURNING id AS run \\gset"
)
RUN = "CAST(:run AS bigint)"
STARTED = (
    "UPDATE jobs_jobrun SET status = 'running', started_at = now(), node = 'n', pid = 1, "
    "task_id = 't', fencing_token = 1, lease_key = 'k' WHERE id = p_run_id"
)
READ_FOR_UPDATE = """
    SELECT jr.scheduled_for, jr.attempt, j.id AS job_id, j.name, j.task,
           coalesce(jr.args, j.args)::text AS args, coalesce(jr.kwargs, j.kwargs)::text AS kwargs,
           j.overlap, j.start_deadline, j.on_lost, j.max_retries, j.retry_backoff,
           j.soft_time_limit, j.time_limit, j.lease_ttl, j.min_hold, j.queue, j.priority,
           j.max_concurrency, j.rate_limit_runs, j.rate_limit_period, jr.trigger,
           jr.released_at, jr.created_at, jr.upstream_run_id {probe}
      INTO r
      FROM jobs_jobrun AS jr JOIN jobs_job AS j ON j.id = jr.job_id
     WHERE jr.id = p_run_id AND jr.status IS NOT DISTINCT FROM 'scheduled'
       FOR UPDATE OF jr;"""
PROBE = (
    ", EXISTS (SELECT 1 FROM jobs_job_upstreams AS d WHERE d.to_job_id = j.id) AS has_downstreams"
)
TAKE_LEASE = f"""
    INSERT INTO jobs_lease AS l (key, holder, token, acquired_at, expires_at)
    VALUES ({KEY}, 'h', 1, now(), now() + make_interval(secs => r.lease_ttl))
    ON CONFLICT (key) DO UPDATE
       SET holder = EXCLUDED.holder, token = l.token + 1, acquired_at = now(),
           expires_at = EXCLUDED.expires_at, stop_requested_by = ''
     WHERE l.expires_at <= now()
    RETURNING l.token INTO v_token;"""
RELEASE = f"UPDATE jobs_lease SET expires_at = now() WHERE key = {KEY}"


def _function(name: str, body: str) -> str:
    return f"""
CREATE FUNCTION {name}(p_run_id bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    r record;
    v_token bigint;
BEGIN
{body}
    {STARTED};
END
$$;"""


FUNCTIONS = "\n".join(
    [
        "CREATE TABLE parts_floor (id int PRIMARY KEY, n bigint NOT NULL);",
        "INSERT INTO parts_floor VALUES (1, 0);",
        _function("parts_update", ""),
        _function("parts_read", READ_FOR_UPDATE.format(probe="")),
        _function("parts_probe", READ_FOR_UPDATE.format(probe=PROBE)),
        _function("parts_lease", READ_FOR_UPDATE.format(probe=PROBE) + TAKE_LEASE),
    ]
)

# (label, the script's lines after NEW_RUN)
SCRIPTS: list[tuple[str, list[str]]] = [
    (
        "the floor's bare UPDATE of a one-row table",
        ["UPDATE parts_floor SET n = n + 1 WHERE id = 1 AND n >= 0;"],
    ),
    ("bare UPDATE of the run row", [STARTED.replace("p_run_id", RUN) + ";"]),
    ("the UPDATE in a PL/pgSQL function", [f"SELECT parts_update({RUN});"]),
    ("+ run and job read FOR UPDATE", [f"SELECT parts_read({RUN});"]),
    ("+ has-downstreams probe", [f"SELECT parts_probe({RUN});"]),
    ("+ lease taken", [f"SELECT parts_lease({RUN});", RELEASE + ";"]),
    (
        "jobs_claim_run",
        [
            f"SELECT o_token FROM jobs_claim_run({RUN}, 'n', 1, 't', 'h', '{{}}') \\gset",
            RELEASE + ";",
        ],
    ),
    (
        "jobs_claim_run, then jobs_finish_run",
        [
            f"SELECT o_token FROM jobs_claim_run({RUN}, 'n', 1, 't', 'h', '{{}}') \\gset",
            f"SELECT o_status FROM jobs_finish_run({RUN}, {KEY}, CAST(:o_token AS bigint), "
            "'succeeded', '', '', NULL, 0, NULL);",
        ],
    ),
]

_LINE = re.compile(r"^\s+(\d+\.\d+)\s+\d+\s+(.*)$")


def _pgbench(url: str, script: Path, runs: int, job_id: int) -> list[float]:
    """pgbench's mean latency (ms) of each line of ``script`` after the insert."""
    command = ["pgbench", "-n", "-M", "prepared", "-r", "-t", str(runs), "-D", f"job={job_id}"]
    done = subprocess.run(
        [*command, "-f", str(script), url],
        capture_output=True,
        text=True,
        check=False,
    )
    latencies = [float(m.group(1)) for line in done.stdout.splitlines() if (m := _LINE.match(line))]
    if done.returncode != 0 or len(latencies) < 2:
        raise RuntimeError(f"pgbench failed on {script.name}: {done.stderr.strip()[-500:]}")
    return latencies[1:]


def _lean_table(cursor: Any) -> None:
    from bench.lease_bench import disable_run_triggers

    disable_run_triggers()
    cursor.execute(
        "SELECT string_agg(quote_ident(indexname), ', ') FROM pg_indexes "
        "WHERE tablename = 'jobs_jobrun' AND (indexdef LIKE '%status%' OR indexdef LIKE '%node%')"
    )
    (names,) = cursor.fetchone()
    if names:
        cursor.execute(f"DROP INDEX {names}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.claim_parts")
    parser.add_argument("--runs", type=int, default=3000, help="transactions per script, round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--lean-table",
        action="store_true",
        help="diagnosis: the run table's triggers off, its status and node indexes dropped",
    )
    args = parser.parse_args(argv)
    if shutil.which("pgbench") is None:
        print("pgbench is needed (Debian: postgresql-client)", file=sys.stderr)
        return 2
    with django_on_fresh_database("_claim_parts", "bench.lease_bench") as url:
        from django.db import connection

        from jobs.models import Job

        job = Job.objects.create(name=JOB, task="bench.noop")
        with connection.cursor() as cursor:
            cursor.execute(FUNCTIONS)
            if args.lean_table:
                _lean_table(cursor)
        connection.close()
        folder = Path(tempfile.mkdtemp(prefix="claim-parts-"))
        results: dict[str, list[list[float]]] = {label: [] for label, _ in SCRIPTS}
        try:
            for round_ in range(args.rounds):
                for index, (label, lines) in enumerate(SCRIPTS):
                    script = folder / f"script{index}.sql"
                    script.write_text("\n".join([NEW_RUN, *lines]) + "\n")
                    results[label].append(_pgbench(url, script, args.runs, job.pk))
                    shown = " + ".join(f"{ms:.3f}" for ms in results[label][-1])
                    print(f"  round {round_ + 1}: {label}: {shown} ms", flush=True)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    print()
    print(table(results, args.runs, args.lean_table))
    return 0


def table(results: dict[str, list[list[float]]], runs: int, lean: bool) -> str:
    table_kind = "lean run table (no triggers, no status/node index)" if lean else "run table"
    lines = [
        f"| statement, {runs} runs x {len(next(iter(results.values())))} rounds, {table_kind} "
        "| mean latency ms (median of rounds) | the line after it, ms |",
        "| --- | --- | --- |",
    ]
    for label, rounds in results.items():
        first = statistics.median(r[0] for r in rounds)
        after = "-" if len(rounds[0]) < 2 else f"{statistics.median(r[1] for r in rounds):.3f}"
        lines.append(f"| {label} | {first:.3f} | {after} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
