"""POSTs one webhook body: to an allowed address only, within one total deadline, no redirects.

The URL's host is resolved once and the connection goes to the address that was checked, so a
name cannot resolve to a public address for the check and a private one for the connection.
The deadline covers connecting, sending and reading the answer's head: a watchdog shuts the
socket at the deadline, so a receiver dripping one byte at a time cannot hold a POST longer.
The standard library only: httpx logs every request's full URL, a secret here.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
from typing import Any
from urllib.parse import unquote, urlsplit

from orchestrator.webhooks import Networks, destination_allowed

DEADLINE_SECONDS = 10.0


class NotDelivered(Exception):
    """No HTTP answer: refused, unreachable, not allowed, not HTTP, or past the deadline.

    One class without detail on purpose: which of these it was would map the server's network.
    """


class WebhookClient:
    """`client(url, body)` POSTs JSON and returns the HTTP status, or raises NotDelivered."""

    def __init__(
        self, allowed_networks: Networks = (), deadline_seconds: float = DEADLINE_SECONDS
    ) -> None:
        self.allowed_networks = allowed_networks
        self.deadline_seconds = deadline_seconds
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    def __call__(self, url: str, body: dict[str, Any]) -> int:
        deadline = time.monotonic() + self.deadline_seconds
        try:
            return self._post(url, body, deadline)
        # ssl.SSLError and TimeoutError are OSErrors; BadStatusLine and InvalidURL HTTPExceptions;
        # an unencodable host or path a ValueError (UnicodeError).
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise NotDelivered(type(exc).__name__) from None

    def abort_all(self) -> None:
        """Cut every POST in flight (shutdown): each ends at once as NotDelivered."""
        with self._lock:
            for sock in list(self._open):
                _cut(sock)

    def _post(self, url: str, body: dict[str, Any], deadline: float) -> int:
        parts = urlsplit(url)
        host = parts.hostname or ""
        secure = parts.scheme == "https"
        port = parts.port or (443 if secure else 80)
        address = self._allowed_address(host, port)
        sock = socket.create_connection((address, port), timeout=_left(deadline))
        held = [sock]
        watchdog = threading.Timer(_left(deadline), lambda: _cut(held[0]))
        watchdog.daemon = True
        with self._lock:
            self._open.add(sock)
        watchdog.start()
        try:
            if secure:
                wrapped = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
                with self._lock:
                    self._open.discard(sock)
                    self._open.add(wrapped)
                held[0] = wrapped
            return _exchange(held[0], host, port, parts, body, deadline)
        finally:
            watchdog.cancel()
            with self._lock:
                self._open.discard(held[0])
            held[0].close()

    def _allowed_address(self, host: str, port: int) -> str:
        for _, _, _, _, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            address = str(sockaddr[0])
            if destination_allowed(address, self.allowed_networks):
                return address
        raise NotDelivered("destination not allowed")


def _exchange(
    sock: socket.socket, host: str, port: int, parts: Any, body: dict[str, Any], deadline: float
) -> int:
    """Send the request on the connected socket and read the status line (never a redirect)."""
    connection = http.client.HTTPConnection(host, port, timeout=_left(deadline))
    connection.sock = sock
    headers = {"Content-Type": "application/json", "User-Agent": "baton-notifier"}
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    connection.request("POST", target, body=json.dumps(body).encode(), headers=headers)
    response = connection.getresponse()
    status = int(response.status)
    response.close()
    return status


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("webhook deadline passed")
    return left


def _cut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed, or never connected
        sock.shutdown(socket.SHUT_RDWR)
