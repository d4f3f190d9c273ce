"""A redis-server of a test's own, to kill and start again on the same port."""

from __future__ import annotations

import subprocess
from pathlib import Path

import redis

from devtools.services import free_port, start_redis


class PrivateRedis:
    """A redis-server of the test's own, to kill and start again on the same port."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = start_redis(folder, self.port)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def drop_pubsub_connections(self) -> int:
        client = redis.Redis.from_url(self.url)
        try:
            return int(client.client_kill_filter(_type="pubsub"))
        finally:
            client.close()

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def start(self) -> None:
        assert self.process is None
        self.process = start_redis(self.folder, self.port)
