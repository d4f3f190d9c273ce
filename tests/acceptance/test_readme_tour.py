"""The README's five-minute tour, as written: every command it gives is read from README.md and
run in order against ``make run``'s platform, and each step's documented outcome is checked, so
the tour cannot drift from the code again.

The platform is the real ``make run`` (two beats, two workers, web, Flower) on free ports, on
the suite's broker and on the test database (pytest-django's, which this test owns), with its
``.dev`` folder (pid files, Flower's state) under the test's ``tmp_path``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests

from devtools.services import free_port
from jobs.models import Job, JobRun, Lease, RunStatus, Trigger
from project.celery import app
from tests.acceptance.conftest import ROOT, flower_json, live_database_url, wait_for

pytestmark = pytest.mark.acceptance

DEMO_JOBS = {"demo.quick", "demo.slow", "demo.failing", "demo.poller"}


# --- the tour, read from README.md ------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    line: str  # as the README writes it
    expect: tuple[str, ...]  # the `quoted` outputs the README gives in brackets right after it


def tour_commands() -> list[Command]:
    """Every ``make ...`` and ``kill ...`` command of the tour section, in order, with the
    outputs quoted in the parenthesis that follows it, if any."""
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"^## A five-minute tour\n(.*?)^## ", readme, re.S | re.M)
    assert match, "README.md has no tour section"
    tour = match.group(1)
    commands = []
    # A command in backticks, then maybe "(`output` ...)" (the output may hold one "(...)").
    after = r"(\s*\(([^()]*(?:\([^()]*\))?[^()]*)\))?"
    for found in re.finditer(r"`((?:make|kill) [^`]+)`" + after, tour):
        remark = found.group(3) or ""
        quoted = tuple(re.findall(r"`([^`]+)`", remark))
        commands.append(Command(" ".join(found.group(1).split()), quoted))
    return commands


# --- the platform -------------------------------------------------------------------------------


@dataclass
class Platform:
    process: subprocess.Popen[bytes]
    output: Path
    dev_dir: Path
    web: str
    flower_port: int
    descendants: set[int] = field(default_factory=set)

    def log(self) -> str:
        return self.output.read_text(errors="replace")

    def printed(self, pattern: str) -> str:
        found = re.search(pattern, self.log())
        assert found, f"make run did not print {pattern!r}"
        return found.group(1)

    def remember_descendants(self) -> None:
        assert self.process.poll() is None, self.log()
        children = psutil.Process(self.process.pid).children(recursive=True)
        self.descendants.update(child.pid for child in children)

    def stop(self) -> None:
        """What Ctrl-C in the terminal does: SIGINT to the foreground process group."""
        if self.process.poll() is None:
            self.remember_descendants()
            os.killpg(self.process.pid, signal.SIGINT)
            self.process.wait(timeout=60)


@pytest.fixture
def platform(transactional_db: None, tmp_path: Path) -> Iterator[Platform]:
    app.control.purge()  # the suite's broker: no message of an earlier test for these workers
    web_port, flower_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("FLOWER_BASIC_AUTH", "JOBS_MODULES")}
    env.update(
        DATABASE_URL=live_database_url(),
        DEVTOOLS_DIR=str(tmp_path / ".dev"),
        WEB_PORT=str(web_port),
        FLOWER_PORT=str(flower_port),
    )
    output = tmp_path / "make-run.log"
    make_run = tour_commands()[0].line
    assert make_run == "make run", make_run
    with output.open("wb") as out:
        process = subprocess.Popen(
            make_run.split(), cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    web = f"http://127.0.0.1:{web_port}"
    running = Platform(process, output, tmp_path / ".dev", web, flower_port)
    try:
        yield running
    finally:
        running.stop()


# --- helpers ------------------------------------------------------------------------------------


class FormReader(HTMLParser):
    """The fields a browser would submit from the form with id ``form_id``."""

    def __init__(self, form_id: str) -> None:
        super().__init__()
        self.form_id = form_id
        self.inside = False
        self.fields: dict[str, str] = {}
        self._select: str | None = None
        self._multiple = False
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.inside = a.get("id") == self.form_id
        if not self.inside or ("name" not in a and tag != "option"):
            return
        kind = a.get("type", "text")
        if tag == "input" and kind not in ("submit", "button", "file"):
            if kind not in ("checkbox", "radio") or "checked" in a:
                self.fields[a["name"]] = a.get("value", "on" if kind == "checkbox" else "")
        elif tag == "select":
            self._select = a["name"]
            self._multiple = "multiple" in a
        elif tag == "option" and self._select:
            # A single select submits its first option when none is selected; a multiple one
            # submits only the selected (here: the last of them; the tour selects none).
            first = self._select not in self.fields and not self._multiple
            if "selected" in a or first:
                self.fields[self._select] = a.get("value", "")
        elif tag == "textarea":
            self._textarea = a["name"]
            self.fields[a["name"]] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False
        elif tag == "select":
            self._select = None
        elif tag == "textarea":
            self._textarea = None

    def handle_data(self, data: str) -> None:
        if self._textarea:
            self.fields[self._textarea] += data


def form_fields(html: str, form_id: str) -> dict[str, str]:
    reader = FormReader(form_id)
    reader.feed(html)
    assert reader.fields, f"no form {form_id!r} on the page"
    return reader.fields


def admin_session(web: str, password: str) -> requests.Session:
    session = requests.Session()
    page = session.get(f"{web}/admin/login/", timeout=10)
    fields = form_fields(page.text, "login-form")
    fields.update(username="admin", password=password, next="/admin/")
    answer = session.post(f"{web}/admin/login/", data=fields, timeout=10)
    assert answer.url.rstrip("/").endswith("/admin"), "the printed admin password did not log in"
    return session


def shell(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", command], cwd=cwd, env=env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def beat_fired(log: str, beat: str, at: datetime) -> list[tuple[int, int]]:
    """(fired, created here) of each tick ``beat`` logged in the second of local time ``at``."""
    stamp = at.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    tick = r"beat fired (\d+) slot\(s\): (\d+) created here"
    pattern = rf"^{beat}\s*\| \[{stamp},\d+: INFO/MainProcess\] {tick}"
    return [(int(a), int(b)) for a, b in re.findall(pattern, log, re.M)]


# --- the tour -----------------------------------------------------------------------------------


def test_the_readme_tour_works_as_written(platform: Platform, tmp_path: Path) -> None:
    commands = tour_commands()
    kills = [c for c in commands if c.line.startswith("kill ")]
    cli = [c for c in commands if c.line.startswith("make manage ")]
    assert len(kills) == 1 and len(cli) >= 4, commands
    # Nothing else to run: `make run` is step 1 (the fixture ran it); later mentions refer to it.
    assert {c.line for c in commands} - {c.line for c in kills + cli} == {"make run"}, commands

    # 1. make run prints the admin password and the Flower login.
    def platform_up() -> bool:
        platform.remember_descendants()
        try:
            return requests.get(f"{platform.web}/admin/login/", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False

    wait_for(platform_up, timeout=120, what="make run's web answering", poll=0.5)
    password = platform.printed(r"Dev admin created: user 'admin', password '([^']+)'")
    flower_login = platform.printed(r"Flower login \(generated for this run\): (\S+)")
    banner = r"beat-1\s*\|\s*\. maxinterval -> (.*)"
    wait_for(lambda: re.search(banner, platform.log()) is not None, 30, "beat-1's banner")
    assert "(0.5s)" in platform.printed(banner)  # JOBS_BEAT_MAX_INTERVAL, not Celery's 5 min

    # 2. The four demo jobs are there, for the admin logged in with the printed password.
    session = admin_session(platform.web, password)
    assert set(Job.objects.values_list("name", flat=True)) >= DEMO_JOBS
    job_list = session.get(f"{platform.web}/admin/jobs/job/", timeout=10).text
    assert all(name in job_list for name in DEMO_JOBS)

    # 3. Add `report` through the admin form: task demo.quick, interval, every 15s.
    add_page = session.get(f"{platform.web}/admin/jobs/job/add/", timeout=10).text
    fields = form_fields(add_page, "job_form")
    fields.update(name="report", task="demo.quick", schedule_type="interval", every="15s")
    saved_at = datetime.now(UTC)
    saved = session.post(f"{platform.web}/admin/jobs/job/add/", data=fields, timeout=10)
    assert Job.objects.filter(name="report").exists(), saved.text[-3000:]
    report = Job.objects.get(name="report")

    # ... both beats fire it; one creates each run. At :15 and :45 past the minute `report` is
    # the only job due, so there the two beats say "1 created here" and "0 created here".
    def alone_slot_seen() -> bool:
        slots = JobRun.objects.filter(job=report).values_list("scheduled_for", flat=True)
        log = platform.log()
        return any(
            slot.second in (15, 45)
            and beat_fired(log, "beat-1", slot)
            and beat_fired(log, "beat-2", slot)
            for slot in slots
        )

    wait_for(alone_slot_seen, timeout=45, what="a slot of `report` due alone", poll=0.5)
    slots = sorted(JobRun.objects.filter(job=report).values_list("scheduled_for", flat=True))
    # Picked up within a second: the first slot due a second after the save already ran.
    picked_up_by = saved_at + timedelta(seconds=1)
    first_due = picked_up_by + timedelta(seconds=-picked_up_by.timestamp() % 15)
    assert slots[0] <= first_due, (saved_at, slots)
    for slot in slots:
        assert JobRun.objects.filter(job=report, scheduled_for=slot).count() == 1
        if slot.second in (15, 45):
            ticks = sorted(beat_fired(platform.log(), b, slot)[0] for b in ("beat-1", "beat-2"))
            assert ticks == [(1, 0), (1, 1)], ticks

    # 4. Each slot once, with status and node; demo.failing's traceback; demo.slow's skipped slots.
    def recorded(job: str, status: str) -> bool:
        return JobRun.objects.filter(job__name=job, status=status).exists()

    wait_for(lambda: recorded("demo.slow", RunStatus.SKIPPED), 60, "a skipped demo.slow slot")
    wait_for(lambda: recorded("demo.failing", RunStatus.FAILED), 60, "a failed demo.failing run")
    failed = JobRun.objects.filter(job__name="demo.failing", status=RunStatus.FAILED).first()
    assert failed is not None and "demo failure for slot" in failed.error
    assert 'raise RuntimeError(f"demo failure for slot' in failed.traceback, failed.traceback
    failed_page = session.get(f"{platform.web}/admin/jobs/jobrun/{failed.pk}/change/", timeout=10)
    assert "Traceback (most recent call last)" in failed_page.text
    skipped = JobRun.objects.filter(job__name="demo.slow", status=RunStatus.SKIPPED).first()
    assert skipped is not None and "held by worker" in skipped.error, skipped
    runs_page = session.get(f"{platform.web}/admin/jobs/jobrun/", timeout=10).text
    assert "skipped" in runs_page and "failed" in runs_page

    # 5. Flower, with the printed login: runs under their job's name, with their state.
    def flower_tasks() -> dict[str, Any]:
        tasks = flower_json(platform.flower_port, "/api/tasks", auth=flower_login)
        return tasks if isinstance(tasks, dict) else {}

    def flower_shows(run: JobRun, state: str) -> bool:
        return flower_tasks().get(f"jobrun-{run.pk}", {}).get("state") == state

    quick = JobRun.objects.filter(job__name="demo.quick", status=RunStatus.SUCCEEDED).first()
    report_run = JobRun.objects.filter(job=report, status=RunStatus.SUCCEEDED).first()
    assert quick is not None and report_run is not None
    states = [
        (quick, "SUCCESS"),
        (report_run, "SUCCESS"),
        (failed, "FAILURE"),
        (skipped, "SUCCESS"),
    ]
    for run, state in states:
        wait_for(lambda: flower_shows(run, state), 30, f"Flower showing {run} {state}")  # noqa: B023
    tasks = flower_tasks()
    quick_task = tasks[f"jobrun-{quick.pk}"]
    assert quick_task["name"] == "demo.quick"
    quick_slot = quick.scheduled_for.isoformat().replace("+00:00", "")
    assert quick_slot in quick_task["args"] + quick_task["kwargs"], quick_task
    assert tasks[f"jobrun-{report_run.pk}"]["name"] == "report"
    assert "demo failure for slot" in tasks[f"jobrun-{failed.pk}"]["exception"]
    assert "'status': 'skipped'" in tasks[f"jobrun-{skipped.pk}"]["result"]

    # 6. Kill the worker that runs demo.poller, by its pid file, as written.
    poller_lease = Lease.objects.get(key="job:demo.poller")
    holder = poller_lease.holder.split("@")[0]  # worker1 or worker2
    number = holder.removeprefix("worker")
    kill = kills[0].line.replace("worker-1", f"worker-{number}")
    pid_file = platform.dev_dir / "run" / f"worker-{number}.pid"
    killed_pids = {int(pid_file.read_text())}
    main = psutil.Process(next(iter(killed_pids)))
    killed_pids.update(child.pid for child in main.children(recursive=True))
    on_it = JobRun.objects.filter(status=RunStatus.RUNNING, node__startswith=f"{holder}@")
    running_there = set(on_it.values_list("pk", flat=True))
    done = shell(kill, cwd=tmp_path, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    wait_for(lambda: not any(_alive(p) for p in killed_pids), 10, "the worker and its pool dead")
    reported = f"worker-{number} exited with code -9; the rest keep running"
    wait_for(lambda: reported in platform.log(), 10, "make run's report")

    def poller_moved() -> bool:
        run = JobRun.objects.filter(job__name="demo.poller", status=RunStatus.RUNNING).first()
        return run is not None and not run.node.startswith(f"{holder}@")

    wait_for(poller_moved, timeout=9 + 1 + 3, what="demo.poller on the other worker")
    tenure = JobRun.objects.get(job__name="demo.poller", status=RunStatus.RUNNING)
    assert tenure.trigger == Trigger.CONTINUOUS
    assert tenure.fencing_token is not None and tenure.fencing_token > poller_lease.token
    # Everything the dead worker was running (its poller tenure, a demo.slow...) is recorded lost.
    assert running_there, "the poller's holder ran its tenure"

    def all_lost() -> bool:
        runs = JobRun.objects.filter(pk__in=running_there)
        return set(runs.values_list("status", flat=True)) == {RunStatus.LOST}

    wait_for(all_lost, timeout=15 + 5 + 5, what="the dead worker's runs recorded lost")

    # 7. The CLI, each command as written, each output as quoted.
    # As from a terminal: not inside `make test`'s make, nor with the suite's job modules.
    cli_env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("JOBS_MODULES", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
    }
    cli_env["DATABASE_URL"] = live_database_url()
    for command in cli:
        done = shell(command.line, cwd=ROOT, env=cli_env)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        for expected in command.expect:
            assert expected in done.stdout, (command, done.stdout)
        if "--json" in command.line:
            rows = json.loads(done.stdout)
            assert rows and {row["status"] for row in rows} >= {"succeeded"}, rows
    nightly = Job.objects.get(name="nightly")
    assert nightly.task == "demo.slow" and not nightly.enabled

    # Ctrl-C: a closing line naming what stopped, and nothing left running.
    platform.stop()
    names = ["web", "beat-1", "beat-2", "worker-1", "worker-2", "flower"]
    names.remove(f"worker-{number}")
    closing = platform.printed(r"devtools\s*\| (stopped .*)")
    assert closing == f"stopped {', '.join(names)} (worker-{number} had already exited)"
    wait_for(
        lambda: not [p for p in platform.descendants if _alive(p)], 20, "every process to exit"
    )
    assert not list((platform.dev_dir / "run").glob("*.pid"))


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
