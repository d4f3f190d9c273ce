"""A daemon thread that repeats one step: the beat's maintenance and the alert sender."""

from __future__ import annotations

import logging
import threading

from django.db import DatabaseError, connection

log = logging.getLogger(__name__)


class PeriodicThread:
    """Calls ``step`` every ``interval`` seconds on a daemon thread until stopped. A failing
    step is logged and the loop carries on: the next one starts from the database again. A
    database error is one warning line (an outage would print a traceback every look) and
    drops the thread's connection, so the next step reconnects."""

    name = "jobs-background"

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    def prepare(self) -> None:
        """Runs once on the thread, before the first step."""

    def step(self) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        self.prepare()
        try:
            while not self._stop.wait(self.interval):
                try:
                    self.step()
                except DatabaseError as exc:
                    log.warning("%s: %s", self.name, exc, extra={"action": f"{self.name}_db_error"})
                    connection.close()
                except Exception:
                    log.exception("%s failed", self.name, extra={"action": self.name})
        finally:
            connection.close()  # this thread's own connection
