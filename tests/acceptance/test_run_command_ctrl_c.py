"""Ctrl-C on ``make run`` with runs under way (issue 41): devtools' process group stops each
worker warmly (SIGTERM to its main process only, then its grace), so the runs in progress finish
or are handed back, none is recorded ``lost``, and no pool process dies under its run
(``WorkerLostError``).

The group is the one ``make run`` builds (``devtools.processes.ProcessGroup`` with the worker
command of ``devtools.__main__.platform_commands``), in a process of its own that gets SIGINT as
a terminal's Ctrl-C gives it; only that worker is started, on this test's queue.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.__main__ import WORKER_STOP_GRACE_SECONDS
from jobs.models import JobRun, RunStatus
from tests.acceptance.conftest import ROOT, Cluster, wait_for

pytestmark = pytest.mark.acceptance

# A run that ignores ctx.stopping: the worker waits for it to finish (started last, so it is
# still under way when Ctrl-C comes).
DEAF_SECONDS = 15.0
# make run's own worker-1 (its command and stop grace), on this test's queue only.
GROUP = """
import dataclasses
import os
import sys
from pathlib import Path

from devtools.__main__ import platform_commands
from devtools.processes import ProcessGroup

pid_dir, queue = sys.argv[1:]
worker = next(c for c in platform_commands(dict(os.environ), "0", "0") if c.name == "worker-1")
group = ProcessGroup(os.environ, Path(pid_dir))
group.start(dataclasses.replace(worker, argv=[*worker.argv, "-Q", queue]))
sys.exit(group.wait())
"""


def _add(cluster: Cluster, name: str, task: str, kwargs: dict[str, float]) -> None:
    added = cluster.manage(
        "jobs", "add", name, "--task", task, "--every", "1h",
        "--kwargs", json.dumps(kwargs), "--queue", cluster.queue,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr


def _trigger(cluster: Cluster, name: str) -> JobRun:
    triggered = cluster.manage("jobs", "run", name)
    assert triggered.returncode == 0, triggered.stderr
    return JobRun.objects.get(pk=int(triggered.stdout.strip()))


def test_ctrl_c_lets_the_runs_under_way_finish_and_loses_none(
    cluster: Cluster, tmp_path: Path
) -> None:
    output = tmp_path / "make-run.log"
    with output.open("wb") as out:
        group = subprocess.Popen(
            [sys.executable, "-c", GROUP, str(tmp_path / "run"), cluster.queue],
            env=cluster.env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    try:
        wait_for(lambda: " ready." in output.read_text(), timeout=90, what="the worker ready")
        _add(cluster, "listening", "tests.wait_for_stop", {"seconds": 120})
        _add(cluster, "deaf", "tests.deaf", {"seconds": DEAF_SECONDS})
        listening, deaf = _trigger(cluster, "listening"), _trigger(cluster, "deaf")
        both = JobRun.objects.filter(pk__in=[deaf.pk, listening.pk], status=RunStatus.RUNNING)
        wait_for(lambda: both.count() == 2, timeout=60, what="both runs to start")
    finally:
        os.killpg(group.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        code = group.wait(timeout=WORKER_STOP_GRACE_SECONDS + 30)
    log = output.read_text(errors="replace")
    assert code == 0, log

    deaf.refresh_from_db()
    listening.refresh_from_db()
    # The deaf run kept going until it was done; the listening one saw ctx.stopping.
    assert (deaf.status, deaf.error) == (RunStatus.SUCCEEDED, ""), log
    assert (listening.status, listening.result) == (RunStatus.SUCCEEDED, "stopped"), log
    assert "WorkerLostError" not in log and "Traceback" not in log, log
    assert "did not stop" not in log, log
    assert "stopped worker-1" in log, log
