"""The README's "Add it to your existing project", done to a brand-new project.

The wheel is built and installed into a fresh virtualenv; ``django-admin startproject`` makes a
project with its own Celery app, one plain ``@shared_task`` and ``PeriodicTask`` rows created
through django-celery-beat's models as its README shows. With the README's settings change, two
beats and a worker run every row's slots once each; rows added and edited while the beats run
are picked up, and a row whose task is unknown is reported while the others keep running.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from django.conf import settings

from tests.acceptance.conftest import wait_for
from tests.support.wheel import build_wheel

pytestmark = pytest.mark.acceptance

PG = "postgresql://postgres@127.0.0.1:5432"

SETTINGS_CHANGE = """
# --- clusterjobs, as the README's "Add it to your existing project" says ---------------------
INSTALLED_APPS += ["django_celery_beat", "jobs", "shop"]
MIDDLEWARE.insert(0, "jobs.web.probes.ProbeMiddleware")
CELERY_BEAT_SCHEDULER = "jobs.beat.scheduler:ClusterScheduler"
# --- this test's own services ------------------------------------------------------------------
DATABASES = {{"default": {{"ENGINE": "django.db.backends.postgresql", "NAME": "{db}",
              "HOST": "127.0.0.1", "USER": "postgres"}}}}
CELERY_BROKER_URL = "{broker}"
CELERY_TASK_DEFAULT_QUEUE = "{queue}"
JOBS_BEAT_MAX_INTERVAL = 0.2
"""

CELERY_APP = """
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")
app = Celery("proj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
"""

TASKS = """
import time

from celery import shared_task


@shared_task
def record(path, label="plain"):
    with open(path, "a") as out:
        out.write(f"{label} {time.time()}\\n")
"""

URLS = """
from django.contrib import admin
from django.urls import include, path

urlpatterns = [path("", include("jobs.urls")), path("admin/", admin.site.urls)]
"""

# django-celery-beat's README, "Example creating interval-based periodic task".
ROWS = """
import itertools
import json
from django_celery_beat.models import IntervalSchedule, PeriodicTask

every_second, _ = IntervalSchedule.objects.get_or_create(every=1, period=IntervalSchedule.SECONDS)
every_two, _ = IntervalSchedule.objects.get_or_create(every=2, period=IntervalSchedule.SECONDS)
PeriodicTask.objects.create(interval=every_second, name="Record every second",
                            task="shop.tasks.record", args=json.dumps([{log!r}]))
PeriodicTask.objects.create(interval=every_two, name="Record with kwargs",
                            task="shop.tasks.record",
                            kwargs=json.dumps({{"path": {log!r}, "label": "kw"}}))
"""


class Site:
    """The new project: its virtualenv, its folder, its processes."""

    def __init__(self, venv: Path, folder: Path, env: dict[str, str]) -> None:
        self.venv, self.folder, self.env = venv, folder, env
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def manage(self, *args: str, timeout: float = 120) -> str:
        result = subprocess.run(
            [str(self.venv / "bin/python"), "manage.py", *args],
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert result.returncode == 0, f"manage.py {args[0]}: {result.stderr[-3000:]}"
        return result.stdout

    def shell(self, code: str) -> str:
        return self.manage("shell", "-c", textwrap.dedent(code))

    def start(self, name: str, *args: str) -> None:
        out = (self.folder / f"{name}.log").open("wb")
        self.processes[name] = subprocess.Popen(
            [str(self.venv / "bin/celery"), "-A", "proj", *args],
            cwd=self.folder,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()

    def running(self) -> bool:
        """Whether every process is alive; one that died fails the test with its log."""
        for name, process in self.processes.items():
            assert process.poll() is None, f"{name} exited:\n{self.log_of(name)[-3000:]}"
        return True

    def log_of(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def stop(self, name: str) -> None:
        process = self.processes.pop(name)
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture
def database() -> Iterator[str]:
    name = f"jobs_install_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def site(tmp_path: Path, database: str) -> Iterator[Site]:
    wheel = build_wheel(tmp_path / "wheel")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # The project's own broker and database clients, as any Django + Celery project has them.
    subprocess.run(
        [*pip, str(wheel), "celery[redis]", "psycopg[binary]"],
        check=True,
        timeout=600,
        capture_output=True,
    )
    folder = tmp_path / "site"
    folder.mkdir()
    subprocess.run(
        [str(venv / "bin/django-admin"), "startproject", "proj", str(folder)], check=True
    )
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "JOBS_", "DATABASE_", "CELERY_", "VIRTUAL_ENV"))
    }
    env.update(PYTHONPATH=str(folder), PATH=f"{venv / 'bin'}:{env.get('PATH', '')}")
    created = Site(venv, folder, env)
    created.manage("startapp", "shop")
    (folder / "shop/tasks.py").write_text(TASKS)
    (folder / "proj/celery.py").write_text(CELERY_APP)
    (folder / "proj/__init__.py").write_text("from .celery import app as celery_app\n")
    (folder / "proj/urls.py").write_text(URLS)
    broker = str(settings.CELERY_BROKER_URL)
    change = SETTINGS_CHANGE.format(db=database, broker=broker, queue=f"install-{uuid.uuid4()}")
    with (folder / "proj/settings.py").open("a") as out:
        out.write(change)
    created.manage("migrate", "-v", "0")
    try:
        yield created
    finally:
        for name in list(created.processes):
            created.stop(name)


def _runs(site: Site) -> list[dict[str, str]]:
    out = site.shell(
        """
        import json
        from jobs.models import JobRun
        print(json.dumps([
            {"job": r.job.name, "slot": r.scheduled_for.isoformat(), "status": r.status,
             "trigger": r.trigger, "error": r.error}
            for r in JobRun.objects.select_related("job").order_by("scheduled_for")
        ]))
        """
    )
    return json.loads(out.strip().splitlines()[-1])


def _lines(log: Path) -> Counter[str]:
    if not log.exists():
        return Counter()
    return Counter(line.split()[0] for line in log.read_text().splitlines())


def test_a_new_project_keeps_its_periodic_tasks_running_once_per_slot(
    site: Site, tmp_path: Path
) -> None:
    log = tmp_path / "side-effects.log"
    site.shell(ROWS.format(log=str(log)))
    site.start("worker", "worker", "-c", "2", "-l", "info")
    site.start("beat-1", "beat", "-l", "info", "-s", str(tmp_path / "b1"))
    site.start("beat-2", "beat", "-l", "info", "-s", str(tmp_path / "b2"))
    wait_for(
        lambda: site.running() and _lines(log)["plain"] >= 3,
        timeout=90,
        what="the adopted rows running",
    )

    # While the beats run: a row added, one edited, one whose task nobody has.
    out = site.shell(
        f"""
        import json
        from django_celery_beat.models import IntervalSchedule, PeriodicTask
        every_second = IntervalSchedule.objects.get(every=1, period=IntervalSchedule.SECONDS)
        PeriodicTask.objects.create(interval=every_second, name="Added while running",
                                    task="shop.tasks.record",
                                    kwargs=json.dumps({{"path": {str(log)!r}, "label": "added"}}))
        from django.utils import timezone
        print(timezone.now().isoformat())
        PeriodicTask.objects.create(interval=every_second, name="Unknown task",
                                    task="shop.tasks.no_such_task")
        edited = PeriodicTask.objects.get(name="Record with kwargs")
        edited.kwargs = json.dumps({{"path": {str(log)!r}, "label": "edited"}})
        edited.save()
        """
    )
    added_at = datetime.fromisoformat(out.strip().splitlines()[-1])
    wait_for(lambda: _lines(log)["added"] >= 3, timeout=30, what="the added row running")
    wait_for(lambda: _lines(log)["edited"] >= 2, timeout=30, what="the edited row's new kwargs")
    site.stop("beat-1")
    site.stop("beat-2")
    wait_for(
        lambda: all(r["status"] not in ("scheduled", "running") for r in _runs(site)),
        timeout=30,
        what="every run finished",
    )
    site.stop("worker")

    runs = _runs(site)
    by_job: dict[str, list[dict[str, str]]] = {}
    for run in runs:
        by_job.setdefault(run["job"], []).append(run)
    assert set(by_job) == {"Record every second", "Record with kwargs", "Added while running"}
    for name, job_runs in by_job.items():
        assert {r["trigger"] for r in job_runs} == {"scheduled"}, name
        # A slot whose previous run still held the job's lease (a worker process stalled on
        # this 2-CPU machine past the next second) is skipped by the job's overlap policy,
        # recorded with the holder: never run twice, never silently dropped.
        assert {r["status"] for r in job_runs} <= {"succeeded", "skipped"}, name
        overlaps = [r for r in job_runs if r["status"] == "skipped"]
        assert all(" held by " in r["error"] for r in overlaps), overlaps
        assert len(overlaps) <= len(job_runs) // 4, f"{name}: skipped too often: {overlaps}"
        slots = [datetime.fromisoformat(r["slot"]) for r in job_runs]
        assert len(slots) == len(set(slots)), f"{name}: a slot ran twice"
        step = timedelta(seconds=2 if name == "Record with kwargs" else 1)
        gaps = [b - a for a, b in itertools.pairwise(slots)]
        assert all(gap == step for gap in gaps), f"{name}: a slot is missing: {gaps}"
    executed = _lines(log)
    succeeded = {
        name: sum(r["status"] == "succeeded" for r in job_runs) for name, job_runs in by_job.items()
    }
    assert executed["plain"] == succeeded["Record every second"]
    assert executed["kw"] + executed["edited"] == succeeded["Record with kwargs"]
    assert executed["added"] == succeeded["Added while running"]
    first_added = datetime.fromisoformat(by_job["Added while running"][0]["slot"])
    assert first_added - added_at <= timedelta(seconds=1.5), "picked up within a second"

    # The unknown task is reported, never run; the adopted rows show as jobs.
    beats = site.log_of("beat-1") + site.log_of("beat-2")
    assert "'Unknown task' cannot be adopted" in beats
    dry_run = site.manage("jobs", "adopt", "--dry-run")
    assert "Unknown task" in dry_run
    listed = json.loads(site.manage("jobs", "list", "--json"))
    assert {"Record every second", "Record with kwargs", "Added while running"} <= {
        job["name"] for job in listed
    }
    admin_page = site.shell(
        """
        from django.contrib.auth.models import User
        from django.test import Client
        user = User.objects.create_superuser("admin", "a@example.com", "x-unused-password-9")
        client = Client()
        client.force_login(user)
        page = client.get("/admin/jobs/job/", HTTP_HOST="localhost")
        live = Client().get("/livez", HTTP_HOST="localhost").status_code
        api = Client().get("/api/jobs", HTTP_HOST="localhost").status_code
        print(page.status_code, "Record every second" in page.content.decode(), live, api)
        """
    )
    # The admin lists the adopted jobs; the probe answers; the API wants a token.
    assert admin_page.strip().splitlines()[-1] == "200 True 200 401"
