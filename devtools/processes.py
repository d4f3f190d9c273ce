"""Run several long-lived processes in the foreground with prefixed output, and stop them all.

Each child gets its own process group, so Ctrl-C in the terminal reaches only us, and stopping a
child can also reap what it forked (a Celery worker's pool). Each child's pid (its process
group's id) is written to ``<pid_dir>/<name>.pid``, so a tour can kill exactly one of them with
its pool (``kill -9 -- -$(cat .dev/run/worker-1.pid)``).

Ctrl-C or SIGTERM stops every child warmly, as docs/how-it-works.md asks of a worker: SIGTERM to
its main process only (a Celery worker then lets its runs finish, or hands back those still
waiting, and stops its own pool), then up to the child's grace for it to exit, and only then
SIGKILL to its whole group, which also reaps anything left behind. Signalling the group at once
would kill a worker's pool processes under their runs (``WorkerLostError``, runs recorded
``lost``). A second Ctrl-C stops at once. Nothing is left, and a closing line says what was
stopped. A child that dies is reported and the others keep running, so a tour can kill a worker
and watch the takeover.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

COLOURS = ["36", "33", "35", "32", "34", "31", "96", "93"]
STOP_GRACE_SECONDS = 15.0


@dataclass(frozen=True)
class Command:
    name: str
    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)  # this process's own, over the group's
    # How long a stop waits for this process to exit by itself before killing its group.
    stop_grace: float = STOP_GRACE_SECONDS


class ProcessGroup:
    def __init__(self, env: Mapping[str, str], pid_dir: Path) -> None:
        self._env = dict(env)
        self._pid_dir = pid_dir
        self._children: list[tuple[Command, subprocess.Popen[bytes]]] = []
        self._width = 8
        self._print_lock = threading.Lock()
        self._all_exited = threading.Event()
        self._hurry = threading.Event()  # a second Ctrl-C: stop at once
        self._stopping = False

    def start(self, command: Command) -> None:
        self._width = max(self._width, len(command.name))
        process = subprocess.Popen(
            list(command.argv),
            env={**self._env, **command.env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._pid_dir.mkdir(parents=True, exist_ok=True)
        self._pid_file(command).write_text(f"{process.pid}\n")
        colour = COLOURS[len(self._children) % len(COLOURS)]
        self._children.append((command, process))
        threading.Thread(
            target=self._pump, args=(command.name, colour, process), daemon=True
        ).start()

    def wait(self) -> int:
        """Block until Ctrl-C, SIGTERM or every child has exited; then stop everything."""
        stop = threading.Event()

        def stop_or_hurry(*_: object) -> None:
            (self._hurry if stop.is_set() else stop).set()

        # Installed explicitly: a shell that started us in the background may have set SIGINT
        # to "ignore", and Ctrl-C must still stop everything.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, stop_or_hurry)
        while not stop.is_set() and not self._all_exited.is_set():
            stop.wait(0.2)
        everything_died = self._all_exited.is_set()
        self.stop_all()
        return 1 if everything_died else 0

    def stop_all(self) -> None:
        """SIGTERM to each child's main process; after its grace (or a second Ctrl-C), SIGKILL
        to its group."""
        self._stopping = True
        exited = [command.name for command, process in self._children if process.poll() is not None]
        for _, process in self._children:
            if process.poll() is None:
                _signal_main(process, signal.SIGTERM)
        longest = max((command.stop_grace for command, _ in self._children), default=0.0)
        if len(exited) < len(self._children):
            self.say(
                "devtools",
                f"stopping: workers finish their runs first (up to {longest:.0f} s); "
                "Ctrl-C again to stop at once",
            )
        started = time.monotonic()
        for command, process in self._children:
            if not self._wait_exit(process, started + command.stop_grace):
                reason = "asked to stop at once" if self._hurry.is_set() else "grace over"
                self.say("devtools", f"{command.name} did not stop ({reason}); killing it")
            # Reap anything the child left behind in its group (pool processes), too.
            _signal_group(process, signal.SIGKILL)
            process.wait()
            self._pid_file(command).unlink(missing_ok=True)
        stopped = [command.name for command, _ in self._children if command.name not in exited]
        closing = f"stopped {', '.join(stopped) or 'nothing'}"
        if exited:
            closing += f" ({', '.join(exited)} had already exited)"
        self.say("devtools", closing)

    def _wait_exit(self, process: subprocess.Popen[bytes], deadline: float) -> bool:
        """Whether ``process`` exited by itself before ``deadline`` (and no second Ctrl-C)."""
        while process.poll() is None:
            if self._hurry.is_set() or time.monotonic() >= deadline:
                return False
            self._hurry.wait(0.1)
        return True

    def _pid_file(self, command: Command) -> Path:
        return self._pid_dir / f"{command.name}.pid"

    def say(self, name: str, line: str, colour: str = "1") -> None:
        prefix = (
            f"\x1b[{colour}m{name:<{self._width}}|\x1b[0m "
            if sys.stdout.isatty()
            else (f"{name:<{self._width}}| ")
        )
        with self._print_lock:
            sys.stdout.write(prefix + line + "\n")
            sys.stdout.flush()

    def _pump(self, name: str, colour: str, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        with process.stdout:
            for raw in process.stdout:
                self.say(name, raw.decode(errors="replace").rstrip(), colour)
        code = process.wait()
        if code != 0 and not self._stopping:
            self.say("devtools", f"{name} exited with code {code}; the rest keep running", "1")
        if all(p.poll() is not None for _, p in self._children):
            self._all_exited.set()


def _signal_main(process: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signum)


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)
