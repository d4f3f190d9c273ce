"""A TCP proxy in front of PostgreSQL that cuts one connection at a chosen statement.

``cut(marker, after_commit=...)`` arms it once: the next connection whose client sends bytes
holding ``marker`` (a statement's text: psycopg sends it when it first prepares it on that
connection) is cut either before those bytes reach the server (the statement never runs), or
after the server answered them in full (up to its ReadyForQuery, sent once the statement
committed) without passing the answer on: the statement committed and its reply was lost, as
when a database restarts, a failover happens or a network drops at the worst moment.

``hang()`` partitions it until ``heal()``: nothing is forwarded either way (new connections are
accepted and hang too) and nothing is closed, so a client waits as on a network that drops its
packets; on ``heal()`` what was held back is delivered, as TCP retransmits it.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass

from tests.support.tcp_proxy import TcpProxy, shut

# The server's ReadyForQuery message (type Z, length 5) ends every answer, then a status byte.
_READY_FOR_QUERY = b"Z\x00\x00\x00\x05"


@dataclass
class _Armed:
    marker: bytes
    after_commit: bool


class ConnectionCutter(TcpProxy):
    def __init__(self, upstream: str | tuple[str, int]) -> None:
        """``upstream``: the server's (host, port), or the path of its Unix socket."""
        self._upstream = upstream
        self._lock = threading.Lock()
        self._armed: _Armed | None = None
        self.cuts = 0
        self._flowing = threading.Event()
        self._flowing.set()
        super().__init__()

    def cut(self, marker: str, *, after_commit: bool) -> None:
        with self._lock:
            self._armed = _Armed(marker.encode(), after_commit)

    def hang(self) -> None:
        """Stop forwarding, without closing anything, until ``heal()``."""
        self._flowing.clear()

    def heal(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._flowing.set()
        super().close()

    def _carry(self, client: socket.socket, server: socket.socket) -> None:
        _Pair(self, client, server).start()

    def _connect(self, client: socket.socket) -> socket.socket:
        # An OSError (the server is gone: stopped first at a test's end) refuses the client.
        if isinstance(self._upstream, str):
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self._upstream)
            return server
        return socket.create_connection(self._upstream)

    def _take(self, data: bytes) -> _Armed | None:
        """The armed cut, disarmed, if ``data`` (from a client) holds its marker."""
        with self._lock:
            armed = self._armed
            if armed is None or armed.marker not in data:
                return None
            self._armed = None
            self.cuts += 1
            return armed


def _message_types(stream: bytes) -> bytes:
    """The type bytes of the whole server messages in ``stream`` (type, then a 4-byte length
    that counts itself)."""
    types = bytearray()
    at = 0
    while at + 5 <= len(stream):
        types.append(stream[at])
        at += 1 + int.from_bytes(stream[at + 1 : at + 5], "big")
    return bytes(types)


class _Pair:
    """One client connection and its server connection, relayed both ways."""

    def __init__(self, cutter: ConnectionCutter, client: socket.socket, server: socket.socket):
        self._cutter = cutter
        self._client = client
        self._server = server
        self._swallowing = False  # the server's answer to the cut statement is being dropped

    def start(self) -> None:
        threading.Thread(target=self._from_client, daemon=True).start()
        threading.Thread(target=self._from_server, daemon=True).start()

    def _from_client(self) -> None:
        while data := self._recv(self._client):
            armed = self._cutter._take(data)
            if armed is not None and not armed.after_commit:
                self._close()
                return
            if armed is not None:
                self._swallowing = True
            if not self._send(self._server, data):
                return
        self._close()

    def _from_server(self) -> None:
        answer = b""
        while data := self._recv(self._server):
            if not self._swallowing:
                if not self._send(self._client, data):
                    return
                continue
            # The client waits for each answer before it sends more, so the armed statement's
            # answers start at a message boundary; each ends with ReadyForQuery.
            answer += data
            if answer[-6:-1] != _READY_FOR_QUERY:
                continue
            if b"C" in _message_types(answer):  # CommandComplete: it was executed (and committed)
                self._close()
                return
            # Only its parsing (psycopg prepares a statement in a round trip of its own).
            if not self._send(self._client, answer):
                return
            answer = b""
        self._close()

    @staticmethod
    def _recv(sock: socket.socket) -> bytes:
        try:
            return sock.recv(65536)
        except OSError:
            return b""

    def _send(self, sock: socket.socket, data: bytes) -> bool:
        self._cutter._flowing.wait()
        try:
            sock.sendall(data)
        except OSError:
            return False
        return True

    def _close(self) -> None:
        shut(self._client)
        shut(self._server)
