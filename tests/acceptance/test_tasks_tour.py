"""docs/tasks.md's "From startproject to a first result", as written: its commands and files are
read from the page and followed in an empty folder, from a fresh virtualenv with the wheel
installed to a task's return value read back through Django's API, so the page cannot drift.

Only the test's own services are substituted: its database (created and dropped here, reached
through libpq's ``PG*`` variables), the suite's broker, and on a Redis broker a key prefix of the
test's own, so that the worker's ``default`` queue is this test's alone. The worker and the beat
are real processes, started with the page's command lines.

Django 5.2 has no ``django.tasks``: skipped there."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytest.importorskip("django.tasks")

import psycopg
import redis
from django.conf import settings
from psycopg.conninfo import make_conninfo

from tests.acceptance.conftest import ROOT, wait_for
from tests.support.wheel import build_wheel

pytestmark = pytest.mark.acceptance

SECTION = "From startproject to a first result"
RESULT_TIMEOUT = 90
# The versions the suite's Django 6 environment runs (requirements/dev-django6.txt).
CONSTRAINTS = ROOT / "requirements/dev-django6.txt"


# --- the tour, read from docs/tasks.md ----------------------------------------------------------


@dataclass(frozen=True)
class Step:
    kind: str  # "sh" (its lines are commands), "file" (written under the project) or "pycon"
    title: str  # the file's path, for a file
    body: str


def read_tour() -> list[Step]:
    """The section's code blocks, in the page's order."""
    page = (ROOT / "docs/tasks.md").read_text()
    found = re.search(rf"^## {re.escape(SECTION)}\n(.*?)^## ", page, re.S | re.M)
    assert found, f"docs/tasks.md has no section {SECTION!r}"
    steps = []
    for info, body in re.findall(r"^```([^\n]*)\n(.*?)^```$", found.group(1), re.S | re.M):
        if title := re.fullmatch(r'python title="([^"]+)"', info):
            steps.append(Step("file", title.group(1), body))
        elif info in ("sh", "pycon"):
            steps.append(Step(info, "", body))
        else:
            raise AssertionError(f"a block the test does not know how to follow: {info!r}")
    return steps


def pycon_statements(body: str) -> list[tuple[str, str]]:
    """(statement, the output the page shows for it) of each ``>>>`` line."""
    statements: list[tuple[str, str]] = []
    for line in body.splitlines():
        if line.startswith(">>> "):
            statements.append((line[4:], ""))
        else:
            statement, shown = statements[-1]
            statements[-1] = (statement, (shown + "\n" + line).strip())
    return statements


# --- the machine the page speaks of: an empty folder, PostgreSQL, a broker ---------------------


def libpq_env() -> dict[str, str]:
    """The suite's PostgreSQL as libpq's environment variables (the page's DATABASES names no
    server: it leaves that to them)."""
    db = settings.DATABASES["default"]
    host = db.get("HOST") or db.get("OPTIONS", {}).get("host") or ""
    named = {"PGHOST": host, "PGPORT": db.get("PORT"), "PGUSER": db.get("USER")}
    named["PGPASSWORD"] = db.get("PASSWORD")
    return {key: str(value) for key, value in named.items() if value}


@pytest.fixture
def database() -> Iterator[str]:
    """The page's ``createdb mysite``, under a name of the test's own; dropped after."""
    name = f"jobs_tasks_tour_{uuid.uuid4().hex[:8]}"
    server = {key.removeprefix("PG").lower(): value for key, value in libpq_env().items()}
    conninfo = make_conninfo(dbname="postgres", **server)
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(conninfo, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Machine:
    """The developer's terminals: where they are, what they activated, what they started."""

    folder: Path
    env: dict[str, str]
    substitutions: dict[str, str]  # the page's database and broker -> the test's
    broker: str
    key_prefix: str = field(default_factory=lambda: f"tasks-tour-{uuid.uuid4().hex[:8]}:")
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def run(self, command: str, timeout: float = 600) -> str:
        done = subprocess.run(
            ["bash", "-c", command], cwd=self.folder, env=self.env,
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        assert done.returncode == 0, f"{command}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    def start(self, name: str, command: str) -> None:
        out = (self.folder / f"{name}.log").open("wb")
        self.processes[name] = subprocess.Popen(
            shlex.split(command), cwd=self.folder, env=self.env,
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        out.close()

    def running(self) -> bool:
        for name, process in self.processes.items():
            assert process.poll() is None, f"{name} exited:\n{self.log_of(name)[-3000:]}"
        return True

    def log_of(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def on_redis(self) -> bool:
        return self.broker.startswith(("redis://", "rediss://", "unix://"))

    def own_queue(self) -> str:
        """Settings that make the page's ``default`` queue the test's alone on the suite's broker
        (a Redis one: the Django 6 tier's): every key of this project under a prefix of its own."""
        if not self.on_redis():
            return ""
        return f'\nCELERY_BROKER_TRANSPORT_OPTIONS = {{"global_keyprefix": "{self.key_prefix}"}}\n'

    def forget_own_keys(self) -> None:
        """The broker's keys under the test's prefix (its queue, its bindings), deleted."""
        if self.on_redis():
            client = redis.Redis.from_url(self.broker)
            for key in client.scan_iter(match=f"{self.key_prefix}*"):
                client.delete(key)
            client.close()

    def shell(self, statements: list[tuple[str, str]], before: str = "") -> list[str]:
        """``python manage.py shell`` with these lines typed in: what each one printed (an
        expression its repr, as the interactive interpreter does)."""
        mark = f"--- statement {uuid.uuid4().hex} ---"
        script = (
            f"{before}\n"
            f"for _line in {[s for s, _ in statements]!r}:\n"
            f"    print({mark!r})\n"
            "    exec(compile(_line, '<shell>', 'single'))\n"
        )
        out = self.run(f"python manage.py shell -c {shlex.quote(script)}", timeout=120)
        return [part.strip() for part in out.split(mark)[1:]]


@pytest.fixture
def machine(tmp_path: Path, database: str) -> Iterator[Machine]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "JOBS_", "DATABASE_", "CELERY_", "VIRTUAL_ENV", "PG"))
        and key != "PYTHONPATH"
    }
    env.update(libpq_env())
    broker = str(settings.CELERY_BROKER_URL)
    substitutions = {
        '"NAME": "mysite"': f'"NAME": "{database}"',
        '"redis://localhost:6379/0"': f'"{broker}"',
    }
    created = Machine(tmp_path, env, substitutions, broker)
    try:
        yield created
    finally:
        created.stop_all()
        created.forget_own_keys()


# --- the tour -----------------------------------------------------------------------------------


def test_the_tasks_tour_works_as_written(machine: Machine, tmp_path: Path) -> None:
    steps = read_tour()
    files = [step.title for step in steps if step.kind == "file"]
    assert files == [
        "myapp/tasks.py",
        "mysite/celery.py",
        "mysite/__init__.py",
        "mysite/settings.py",
    ]
    sessions = [pycon_statements(step.body) for step in steps if step.kind == "pycon"]
    assert len(sessions) == 2, sessions
    wheel = build_wheel(tmp_path / "wheel")
    for step in steps:
        if step.kind == "sh":
            for command in step.body.splitlines():
                follow(machine, command, wheel)
        elif step.kind == "file":
            write_file(machine, step)
    assert set(machine.processes) == {"worker", "beat"}, machine.processes

    # `python manage.py shell`: the page's first session, typed in; then the result's id.
    first, then = sessions
    printed = machine.shell([*first, ("print(result.id)", "")])
    assert printed[:-1] == [shown for _, shown in first], (printed, first)
    result_id = printed[-1]
    assert re.fullmatch(r"jobrun-\d+", result_id), printed

    # ... a moment later, read back through Django's API in another shell: SUCCESSFUL, 5.
    read_back = f"from myapp.tasks import add\nresult = add.get_result({result_id!r})"

    def finished() -> bool:
        machine.running()
        status = machine.shell([("print(result.status)", "")], before=read_back)[-1]
        return status not in ("TaskResultStatus.READY", "TaskResultStatus.RUNNING")

    wait_for(finished, timeout=RESULT_TIMEOUT, what="the first result", poll=1)
    printed = machine.shell(then, before=read_back)
    assert printed == [shown for _, shown in then], (printed, machine.log_of("worker")[-3000:])
    # The worker's log line the page quotes.
    assert f"Task id={result_id} path=myapp.tasks.add state=SUCCESSFUL" in machine.log_of("worker")


def follow(machine: Machine, command: str, wheel: Path) -> None:
    """One command of the page, as typed in the developer's terminal."""
    words = shlex.split(command)
    if words[:3] == ["python3", "-m", "venv"]:
        # The suite's interpreter: Python 3.12, which Django 6 needs.
        venv = machine.folder / words[3]
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    elif words[0] == "source":
        venv = machine.folder / words[1].removesuffix("/bin/activate")
        machine.env.update(VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}:{machine.env['PATH']}")
    elif words[:2] == ["pip", "install"]:
        # `clusterjobs` is the wheel built from this checkout; the other packages are installed
        # at the versions the suite's Django 6 environment pins.
        assert "clusterjobs" in words, command
        packages = [str(wheel) if word == "clusterjobs" else word for word in words[2:]]
        machine.run(shlex.join(["pip", "install", "-q", "-c", str(CONSTRAINTS), *packages]))
    elif words[0] == "cd":
        machine.folder = machine.folder / words[1]
    elif words[0] == "createdb":
        assert words[1:] == ["mysite"], command  # the `database` fixture made it, named its own
    elif words[:3] == ["python", "manage.py", "check"]:
        out = machine.run(command)
        assert "System check identified no issues" in out, out
    elif words[:2] == ["celery", "-A"]:
        assert words[3] in ("worker", "beat") and words[3] not in machine.processes, command
        machine.start(words[3], command)
    else:
        machine.run(command)


def write_file(machine: Machine, step: Step) -> None:
    """A file the page shows, under the project, with the test's database and broker; a file
    startproject made (settings.py, an empty __init__.py) gets the page's lines at its end."""
    text = step.body
    if step.title == "mysite/settings.py":
        for ours, theirs in machine.substitutions.items():
            assert ours in text, f"the page's settings no longer say {ours}"
            text = text.replace(ours, theirs)
        text += machine.own_queue()
    with (machine.folder / step.title).open("a") as out:
        out.write("\n" + text)
