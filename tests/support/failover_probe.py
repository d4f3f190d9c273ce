"""Two holders of one job's lease, either side of a database failover (tests/acceptance/
test_database_failover.py), each run in a ``manage.py shell`` of its own against the database
the test moves; and the test's jobs, made the same way.

``take("old-holder")`` before the failover: a run of job ``probe`` (whose queue no worker
reads) is triggered and claimed with its lease, as a worker claims one, and left running.
``take_over(...)`` after it: once that lease lapsed, a second run is claimed by ``new-holder``;
then the old holder, which never learnt of the failover, tries what a paused worker would on
waking: a fenced write (``ctx.fenced()``'s check) and its fenced finish. Each prints one JSON
line of what the database answered.
"""

from __future__ import annotations

import json
import os
import time

from django.db import transaction

from jobs.broker.dispatch import trigger_now
from jobs.exceptions import LeaseLost
from jobs.guard import lease, run_records
from jobs.models import Job, JobRun, RunStatus
from jobs.web.health import check_configuration

JOB = "probe"
KEY = f"job:{JOB}"


def create_jobs(names: list[str], folder: str, queue: str, probe_ttl: int) -> None:
    """Jobs ``names`` every second on ``queue``, and the probe's job, triggered only, on a
    queue no worker reads (the probe claims its runs itself); each job's ``tests.record``
    writes to ``<folder>/<name>.log``."""
    from jobs.audit import Actor
    from jobs.schedule.kinds import Every, Triggered
    from jobs.services import JobDefinition, create_job

    def define(name: str, schedule: Every | Triggered, **policies: object) -> None:
        definition = JobDefinition(
            name=name,
            task="tests.record",
            schedule=schedule,
            kwargs={"log": f"{folder}/{name}.log"},
            policies={"start_deadline": 60, **policies},
        )
        create_job(definition, actor=Actor.code("tests"))

    for name in names:
        define(name, Every(1), queue=queue, lease_ttl=30)
    define(JOB, Triggered(), queue=f"{queue}-nobody", lease_ttl=probe_ttl)
    print(json.dumps({"created": [*names, JOB]}))


def _claim(holder: str) -> tuple[int, int]:
    run = trigger_now(Job.objects.get(name=JOB))
    claim = run_records.claim(
        run.pk, node=holder, pid=os.getpid(), task_id=f"{JOB}-{holder}", holder=holder
    )
    assert claim is not None and claim.lease is not None, claim
    return run.pk, claim.lease.token


def take(holder: str) -> None:
    run, token = _claim(holder)
    print(json.dumps({"run": run, "token": token}))


def take_over(old_run: int, old_token: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while lease.current_holder(KEY) is not None:  # the old holder's lease lapses (its ttl)
        if time.monotonic() > deadline:
            raise AssertionError(f"{KEY} still held after {timeout} s")
        time.sleep(0.1)
    new_run, new_token = _claim("new-holder")
    try:
        with transaction.atomic():
            lease.verify_held(KEY, old_token)
        old_write = "accepted"
    except LeaseLost:
        old_write = "rejected"
    old_finish = run_records.finish_fenced(
        old_run, key=KEY, token=old_token, status=RunStatus.SUCCEEDED
    )
    holder = lease.current_holder(KEY)
    new_still_holds = holder is not None and holder.token == new_token
    new_finish = run_records.finish_fenced(
        new_run, key=KEY, token=new_token, status=RunStatus.SUCCEEDED
    )
    old_row = JobRun.objects.filter(pk=old_run).values_list("status", "fencing_token").first()

    print(
        json.dumps(
            {
                "new_run": new_run,
                "new_token": new_token,
                "old_fenced_write": old_write,
                "old_finish": old_finish.status,
                "old_run_after": list(old_row) if old_row else None,
                "new_still_holds_after_old_finish": new_still_holds,
                "new_finish": new_finish.status,
                # What /healthz reports under checks.configuration.
                "problems": [p["cause"] for p in check_configuration()["problems"]],
            }
        )
    )
