"""The accepting half of the tests' TCP proxies: a listener on a free port of 127.0.0.1 whose
thread takes each client, asks the proxy for the server connection to carry it to (or refuses
it), and hands the pair on. ``tests.support.connection_cutter`` cuts one connection at a chosen
statement; ``tests.support.replication.Relay`` moves between servers."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    """Subclasses set their own state, then call ``__init__`` (which starts accepting), and
    define ``_connect`` and ``_carry``."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        shut(self._listener)  # wakes the accepting thread

    def _connect(self, client: socket.socket) -> socket.socket:
        """The server connection for ``client``; ``OSError`` refuses the client."""
        raise NotImplementedError

    def _carry(self, client: socket.socket, server: socket.socket) -> None:
        """Relay the pair, both ways, on threads of their own."""
        raise NotImplementedError

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = self._connect(client)
            except OSError:
                shut(client)
                continue
            self._carry(client, server)


def shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
