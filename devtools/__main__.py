"""``python -m devtools run|test|manage``: what the Makefile's run and test targets call.

Every subcommand first makes sure a database and a broker exist: those named by
``DATABASE_URL`` / ``CELERY_BROKER_URL``, or embedded ones started under ``.dev/``. ``test`` also
makes sure a RabbitMQ exists for the tests that run on it (``devtools/rabbitmq.py``). ``run`` and
``manage`` load the same job modules (the demo jobs too), so the CLI knows every job the
platform runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from devtools.processes import Command, ProcessGroup
from devtools.rabbitmq import rabbitmq_for_tests
from devtools.services import DEV_DIR, ROOT, embedded_services
from devtools.side_by_side import pytest_options

PYTHON = sys.executable
MANAGE = [PYTHON, str(ROOT / "manage.py")]
CELERY = [PYTHON, "-m", "celery", "-A", "project"]
DEMO_MODULE = "demo.jobs"
PID_DIR = DEV_DIR / "run"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools")
    verbs = parser.add_subparsers(dest="verb", required=True)
    verbs.add_parser("run", help="the whole platform in the foreground (Ctrl-C stops it)")
    test = verbs.add_parser("test", help="the test suite")
    test.add_argument("pytest_args", nargs=argparse.REMAINDER)
    manage = verbs.add_parser("manage", help="a manage.py command against the dev services")
    manage.add_argument("manage_args", nargs=argparse.REMAINDER)
    # pytest's options may come first (`make test PYTEST_ARGS="--lf"`), which argparse's
    # REMAINDER alone leaves unparsed.
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.verb != "test":
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.verb == "test":
        args.pytest_args = [*unknown, *args.pytest_args]

    logging.basicConfig(level=logging.INFO, format="devtools | %(message)s")
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    env = dict(os.environ)
    with embedded_services(env) as urls:
        env.update(urls.as_env())
        env.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        # Development settings unless told otherwise; production settings have their own tests.
        env.setdefault("DJANGO_DEBUG", "1")
        if args.verb == "run":
            return run_platform(with_dev_jobs(env))
        if args.verb == "test":
            with rabbitmq_for_tests(env) as rabbitmq_env:
                env.update(rabbitmq_env)
                pytest = [PYTHON, "-m", "pytest", *pytest_options(args.pytest_args, env)]
                return subprocess.call([*pytest, *args.pytest_args], env=env, cwd=ROOT)
        return subprocess.call([*MANAGE, *args.manage_args], env=with_dev_jobs(env), cwd=ROOT)


def with_dev_jobs(env: dict[str, str]) -> dict[str, str]:
    """``env`` whose ``JOBS_MODULES`` also names the demo jobs: the one definition of what the
    dev platform and the dev CLI load."""
    modules = [m.strip() for m in env.get("JOBS_MODULES", "").split(",") if m.strip()]
    if DEMO_MODULE not in modules:
        modules.append(DEMO_MODULE)
    return {**env, "JOBS_MODULES": ",".join(modules)}


def run_platform(env: dict[str, str]) -> int:
    if not env.get("FLOWER_BASIC_AUTH"):
        env["FLOWER_BASIC_AUTH"] = f"admin:{secrets.token_urlsafe(12)}"
        print(f"Flower login (generated for this run): {env['FLOWER_BASIC_AUTH']}")
    web_port = env.get("WEB_PORT", "8000")
    flower_port = env.get("FLOWER_PORT", "5555")
    env.setdefault("FLOWER_URL", f"http://127.0.0.1:{flower_port}")  # admin links to tasks

    # The pool is the web's alone (docs/connections.md): beats and workers refuse it.
    env.pop("DATABASE_POOL_MAX_SIZE", None)
    subprocess.run([*MANAGE, "migrate", "--noinput", "-v", "1"], env=env, cwd=ROOT, check=True)
    subprocess.run([PYTHON, "-m", "devtools.dev_admin"], env=env, cwd=ROOT, check=True)

    group = ProcessGroup(env, PID_DIR)
    for command in platform_commands(env, web_port, flower_port):
        group.start(command)
    group.say("devtools", f"admin:  http://127.0.0.1:{web_port}/admin/")
    group.say("devtools", f"flower: http://127.0.0.1:{flower_port}/  (Ctrl-C stops everything)")
    return group.wait()


def platform_commands(env: dict[str, str], web_port: str, flower_port: str) -> list[Command]:
    """What ``make run`` starts: the web, two beats, two workers and Flower.

    The web (runserver: a thread per request) shares a pool of ``WEB_DATABASE_POOL_MAX_SIZE``
    connections (default 8) among its requests; every other process keeps a connection per
    thread of its own (docs/connections.md)."""
    pool = env.get("WEB_DATABASE_POOL_MAX_SIZE") or str(WEB_POOL_DEFAULT)
    web = [*MANAGE, "runserver", f"127.0.0.1:{web_port}", "--noreload"]
    commands = [Command("web", web, {"DATABASE_POOL_MAX_SIZE": pool})]
    for n in (1, 2):
        commands.append(Command(f"beat-{n}", [*CELERY, "beat", "-l", "info"]))
    for n in (1, 2):
        worker = [*CELERY, "worker", "-n", f"worker{n}@%h", "-c", "2", "-l", "info", "-E"]
        commands.append(Command(f"worker-{n}", worker, stop_grace=WORKER_STOP_GRACE_SECONDS))
    flower = [
        *CELERY, "flower", f"--port={flower_port}", "--address=127.0.0.1",
        *flower_state_options(DEV_DIR / "flower.db"),
    ]  # fmt: skip
    commands.append(Command("flower", flower))
    return commands


# The web's connections under `make run`: eight clients at once never wait for one.
WEB_POOL_DEFAULT = 8
# What a deployment gives a worker to finish its runs after SIGTERM (docs/deploy.md: Kubernetes'
# terminationGracePeriodSeconds, systemd's TimeoutStopSec): a job that honours ctx.stopping ends
# within a second or two; one that ignores it still gets this long before its run is lost.
WORKER_STOP_GRACE_SECONDS = 60.0


def flower_state_options(db: Path) -> list[str]:
    """Flower keeps the tasks it saw in ``db`` across restarts: saved every minute and when it
    stops (SIGTERM), loaded when it starts. docker/compose.yaml gives it the same options."""
    return ["--persistent=True", f"--db={db}", f"--state_save_interval={FLOWER_SAVE_EVERY_MS}"]


FLOWER_SAVE_EVERY_MS = 60_000


if __name__ == "__main__":
    sys.exit(main())
