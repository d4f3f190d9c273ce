"""How ``make run``'s process group stops its children (devtools/processes.py): SIGTERM to each
child's main process only, its grace for it to exit, and only then SIGKILL to its group; a
second Ctrl-C stops at once. Plain Python children stand in for a Celery worker and its pool
(tests/acceptance/test_run_command_ctrl_c.py has the real worker)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from devtools.processes import Command, ProcessGroup
from tests.acceptance.conftest import ROOT, wait_for

# A main process with a "pool" child in its process group. The child writes down any SIGTERM it
# gets; the main process, on SIGTERM, takes a moment (finishing a run) and exits.
MAIN_WITH_POOL = """
import signal, subprocess, sys, time
pool = subprocess.Popen([sys.executable, "-c", '''
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: open(sys.argv[1], "a").write("pool got SIGTERM"))
open(sys.argv[1] + ".ready", "w").close()
time.sleep(60)
''', sys.argv[1]])
signal.signal(signal.SIGTERM, lambda *_: (time.sleep(0.5), sys.exit(0)))
time.sleep(60)
"""
DEAF = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"  # noqa: E501
GROUP = """
import sys
from pathlib import Path
from devtools.processes import Command, ProcessGroup
group = ProcessGroup({}, Path(sys.argv[1]))
group.start(Command("deaf", [sys.executable, "-c", sys.argv[2]], stop_grace=30))
sys.exit(group.wait())
"""


def test_a_stop_signals_the_main_process_only_and_kills_its_group_after_it_exits(
    tmp_path: Path,
) -> None:
    pool_log = tmp_path / "pool.log"
    group = ProcessGroup(dict(os.environ), tmp_path / "run")
    group.start(Command("worker", [sys.executable, "-c", MAIN_WITH_POOL, str(pool_log)]))
    wait_for(Path(f"{pool_log}.ready").exists, timeout=20, what="the pool process")

    group.stop_all()

    assert not pool_log.exists(), pool_log.read_text()  # SIGKILLed after its main, never TERMed
    assert not (tmp_path / "run" / "worker.pid").exists()


def test_a_second_ctrl_c_stops_at_once(tmp_path: Path) -> None:
    output = tmp_path / "out.log"
    with output.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", GROUP, str(tmp_path / "run"), DEAF],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
    wait_for(lambda: "deaf" in output.read_text(), timeout=20, what="the child up")
    os.killpg(process.pid, signal.SIGINT)
    wait_for(lambda: "Ctrl-C again" in output.read_text(), timeout=10, what="the stop begun")
    asked = time.monotonic()
    os.killpg(process.pid, signal.SIGINT)
    assert process.wait(timeout=10) == 0
    assert time.monotonic() - asked < 5, "the second Ctrl-C waited for the grace"
    assert "deaf did not stop (asked to stop at once); killing it" in output.read_text()
