"""Continuous jobs on a cluster under test: the workers' settings for them, jobs of both forms,
and who holds which lease now."""

from __future__ import annotations

from pathlib import Path

from django.db.models.functions import Now

from jobs.audit import Actor
from jobs.continuous.supervisor import SUPERVISION_PERIOD, node_of
from jobs.models import Lease, Node
from jobs.services import JobDefinition, create_job
from tests.acceptance.conftest import Cluster
from tests.support.jobs_continuous import Holders

HEARTBEAT = 1.0
TTL = 3 * HEARTBEAT
# The promise: running again within ttl + one supervision period. The slack absorbs a loaded
# 2-core test machine; the benchmark measures the real distribution.
TAKEOVER_BOUND = TTL + SUPERVISION_PERIOD + 3.0
STARTUP = 90  # worker processes boot slowly on a busy machine


def use_continuous_jobs(cluster: Cluster, tmp_path: Path) -> Path:
    cluster.env.update(
        JOBS_MODULES="tests.support.jobs_under_test,tests.support.jobs_continuous",
        JOBS_NODE_HEARTBEAT=str(HEARTBEAT),
    )
    return tmp_path / "continuous.log"


def add_continuous_jobs(cluster: Cluster, log: Path, names: list[str]) -> list[str]:
    """Continuous jobs on the cluster's queue, alternately long-form and step-form. The long
    ones take 0.3 s to return once asked to stop, so that a lease handed back before its
    function returned would show as two tenures executing at once."""
    keys = []
    for i, name in enumerate(names):
        loop = i % 2 == 0
        job = create_job(
            JobDefinition(
                name=name,
                task="tests.continuous.loop" if loop else "tests.continuous.step",
                schedule=None,
                kwargs={"log": str(log), "linger": 0.3} if loop else {"log": str(log)},
                policies={"queue": cluster.queue},
            ),
            actor=Actor.code("tests"),
        )
        keys.append(job.lock_key)
    return keys


def live_holders() -> Holders:
    rows = Lease.objects.filter(expires_at__gt=Now()).values_list("key", "holder", "token")
    return {key: (node_of(holder), token) for key, holder, token in rows}


def node_named(name: str) -> str:
    """The full node name (``name@host``) a worker registered."""
    return Node.objects.get(name__startswith=f"{name}@").name
