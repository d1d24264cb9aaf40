"""The HTTP server: routes POST /api/v1/<service>/<method>, blob PUTs and file GETs.

Built on http.server rather than an ASGI stack because fault injection needs to drop a
connection without any response, which ASGI servers do not expose.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from tests.kaggle_emulator import packages, wire
from tests.kaggle_emulator.auth import authenticate
from tests.kaggle_emulator.calls import RateLimited
from tests.kaggle_emulator.errors import ApiError
from tests.kaggle_emulator.faults import FaultKind
from tests.kaggle_emulator.links import ORCHESTRATOR
from tests.kaggle_emulator.routes import ROUTES
from tests.kaggle_emulator.routes.responses import Redirect
from tests.kaggle_emulator.state import CallContext, EmulatorState


class EmulatorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(
        self, address: tuple[str, int], state: EmulatorState, link: str = ORCHESTRATOR
    ) -> None:
        self.state = state
        # Which link its callers reach Kaggle over (links.py): the orchestrator's, or a kernel's.
        self.link = link
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: EmulatorHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: request lines are not logged, and headers (with keys) never are."""

    @property
    def state(self) -> EmulatorState:
        return self.server.state

    # ---- plumbing -----------------------------------------------------------------------

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _drop(self) -> None:
        """Close the connection without a response: the client sees it reset mid-call."""
        time.sleep(self.state.faults.hang_seconds)
        self.close_connection = True

    def _fail_before(self, fault: FaultKind, transfer: bool) -> None:
        if fault is FaultKind.RATE_LIMITED:
            retry = self.state.faults.retry_after_seconds
            headers = {} if retry is None else {"Retry-After": f"{retry:g}"}
            payload = {"code": 429, "message": "Too many requests"}
            self._send(429, json.dumps(payload).encode(), "application/json", headers)
        elif fault is FaultKind.SERVER_ERROR:
            status = 503 if transfer else 500
            self._send_json(status, {"code": status, "message": "Internal error (injected)"})
        elif fault is FaultKind.NOT_FOUND:
            self._send_json(404, {"code": 404, "message": "Not found (injected)"})
        elif fault is FaultKind.BODY_ERROR:
            self._send_json(200, {"status": "Error", "error": self.state.faults.body_error})
        else:
            self._drop()

    def _base_url(self) -> str:
        host = self.headers.get("Host") or f"localhost:{self.server.server_address[1]}"
        return f"http://{host}"

    # ---- RPC ------------------------------------------------------------------------------

    def do_POST(self) -> None:
        body = self._read_body()
        parts = urlsplit(self.path).path.strip("/").split("/")
        if len(parts) != 4 or parts[:2] != ["api", "v1"]:
            self._send_json(404, {"code": 404, "message": f"No such endpoint {self.path}"})
            return
        service, method = parts[2], parts[3]
        handler = ROUTES.get((service, method))
        if handler is None:
            self._send_json(404, {"code": 404, "message": f"{service}/{method} is not emulated"})
            return
        fault = self.state.faults.draw(method)
        after_effect = (FaultKind.LOST_RESPONSE, FaultKind.SERVER_ERROR_AFTER_EFFECT)
        if fault is not None and fault not in after_effect:
            self._fail_before(fault, transfer=False)
            return
        status, reply = self._call(handler, method, body)
        if fault is FaultKind.LOST_RESPONSE:
            self._drop()
        elif fault is FaultKind.SERVER_ERROR_AFTER_EFFECT:
            self._fail_before(FaultKind.SERVER_ERROR, transfer=False)
        elif isinstance(reply, Redirect):
            self._send(302, b"", "text/plain", {"Location": reply.url})
        elif isinstance(reply, RateLimited):
            headers = {"Retry-After": f"{reply.retry_after:g}"}
            self._send(429, json.dumps(reply.body()).encode(), "application/json", headers)
        else:
            self._send_json(status, reply)

    def _call(self, handler: Any, method: str, raw: bytes) -> tuple[int, Any]:
        state = self.state
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ApiError(400, "The request body must be a JSON object")
            with state.lock:
                user = authenticate(
                    self.headers.get("Authorization"),
                    state.options.users,
                    state.tokens(),
                )
                now = state.clock.now()
                label = body.get("versionLabel")
                state.calls.admit(user, method, now, label if isinstance(label, str) else None)
                state.kernels.reconcile(now)
                return 200, handler(state, CallContext(user, self._base_url(), now), body)
        except json.JSONDecodeError:
            return 400, ApiError(400, "The request body is not JSON").body()
        except RateLimited as limited:
            return 429, limited
        except ApiError as error:
            return error.status, error.body()
        except Exception:  # a bug in the emulator: report it loudly, answer 500
            state.internal_errors.append(traceback.format_exc())
            traceback.print_exc(file=sys.stderr)
            return 500, {"code": 500, "message": "Internal emulator error"}

    # ---- blob uploads ------------------------------------------------------------------

    def do_PUT(self) -> None:
        body = self._read_body()
        parts = urlsplit(self.path).path.strip("/").split("/")
        if len(parts) != 3 or parts[0] != "upload" or parts[1] != self.state.url_secret:
            self._send_json(404, {"code": 404, "message": "No such upload"})
            return
        fault = self.state.faults.draw("upload", transfer=True)
        if fault is not None:
            self._fail_before(fault, transfer=True)
            return
        self.state.links.charge(self.server.link, "up", len(body))
        result = self.state.blobs.put(parts[2], body, self.headers.get("Content-Range"))
        self._send(result.status, b"", "text/plain", result.headers)

    # ---- downloads ---------------------------------------------------------------------

    def do_GET(self) -> None:
        parts = [unquote(p) for p in urlsplit(self.path).path.strip("/").split("/")]
        if parts == [""]:
            self._send_json(200, {"emulator": "kaggle"})
            return
        if parts[0] == packages.PREFIX:
            self._package(parts[1:])
            return
        if len(parts) < 3 or parts[0] != "files" or parts[1] != self.state.url_secret:
            self._send_json(404, {"code": 404, "message": "Not found"})
            return
        fault = self.state.faults.draw("download", transfer=True)
        if fault is not None:
            self._fail_before(fault, transfer=True)
            return
        path = self._file_for(parts[2:])
        if path is None:
            self._send_json(404, {"code": 404, "message": "Not found"})
            return
        stat = path.stat()
        self.state.links.charge(self.server.link, "down", stat.st_size)
        headers = {"Last-Modified": wire.http_date(stat.st_mtime)}
        self._send(200, path.read_bytes(), "application/octet-stream", headers)

    def _package(self, parts: list[str]) -> None:
        """The package index (packages.py): its page, or one distribution."""
        index = self.state.packages
        if parts in ([], [""]):
            self._send(200, index.page(), "text/html")
            return
        body = index.download("/".join(parts))
        if body is None:
            self._send_json(404, {"code": 404, "message": "Not found"})
            return
        self._send(200, body, "application/octet-stream")

    def _file_for(self, parts: list[str]) -> Path | None:
        with self.state.lock:
            if parts[0] == "output" and len(parts) >= 3 and parts[1].isdigit():
                session = self.state.kernels.sessions.get(int(parts[1]))
                if session is None:
                    return None
                wanted = "/".join(parts[2:])
                files = {p for p, _ in self.state.kernels.output_files(session)}
                return session.root / "working" / wanted if wanted in files else None
            if parts[0] == "datasets" and len(parts) >= 5 and parts[3].isdigit():
                return self._dataset_file(parts)
        return None

    def _dataset_file(self, parts: list[str]) -> Path | None:
        owner, slug, number = parts[1], parts[2], int(parts[3])
        dataset = next(
            (d for d in self.state.datasets.all() if d.owner == owner and d.slug == slug), None
        )
        if dataset is None or not 0 < number <= len(dataset.versions):
            return None
        version = dataset.versions[number - 1]
        if parts[4:] == ["archive.zip"]:
            return version.zipped()
        wanted = "/".join(parts[5:])
        if parts[4] == "files" and wanted in {p for p, _ in version.files()}:
            return version.directory / wanted
        return None
