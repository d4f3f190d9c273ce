"""A local webhook receiver for the alert tests: a tiny HTTP server on 127.0.0.1 (a free port)
in a thread, recording every request; it may answer 500 to the first ones."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes
    status: int  # what the receiver answered

    @property
    def payload(self) -> Any:
        return json.loads(self.body)

    def signature_verifies(self, secret: str) -> bool:
        """What a receiver does: HMAC-SHA256 of the raw body, compared in constant time."""
        expected = "sha256=" + hmac.new(secret.encode(), self.body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, self.headers.get("X-Jobs-Signature", ""))


class Receiver:
    def __init__(self, fail_first: int = 0, delay: float = 0.0, redirect_to: str = "") -> None:
        self.fail_first = fail_first
        self.redirect_to = redirect_to  # answer every POST 302 to this URL
        self.delay = delay  # seconds before answering (a slow receiver)
        self.received: list[Received] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                time.sleep(receiver.delay)
                with receiver._lock:
                    status = 500 if len(receiver.received) < receiver.fail_first else 200
                    status = 302 if receiver.redirect_to else status
                    receiver.received.append(Received(dict(self.headers.items()), body, status))
                self.send_response(status)
                if receiver.redirect_to:
                    self.send_header("Location", receiver.redirect_to)
                self.end_headers()
                self.wfile.write(b"busy" if status == 500 else b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hook"

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def accepted(self) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.status == 200]
