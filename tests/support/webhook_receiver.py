"""A local HTTP receiver for webhook tests: records every POST, answers with scripted codes,
and can be down (its port bound but not listening, so connections are refused) until started."""

from __future__ import annotations

import json
import socket
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.codes: deque[int] = deque()  # answers to give, then 200
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def url(self, path: str = "/hook/s3cr3t-path-token") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                receiver.received.append(json.loads(self.rfile.read(length)))
                receiver.paths.append(self.path)
                code = receiver.codes.popleft() if receiver.codes else 200
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler, bind_and_activate=False)
        server.socket.close()
        server.socket = self._socket
        server.server_activate()
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            assert self._thread is not None
            self._thread.join()
        else:
            self._socket.close()
