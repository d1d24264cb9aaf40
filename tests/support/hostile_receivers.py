"""Webhook receivers that misbehave, on loopback: one answers a non-HTTP banner, one drips its
answer one byte every few seconds, and one port accepts connections and never answers."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable


class HostileReceivers:
    def __init__(self, drip_seconds: float = 5.0) -> None:
        self.drip_seconds = drip_seconds
        self.garbage_hits = 0
        self.drip_hits = 0
        self._stop = threading.Event()
        self._garbage = _listener()
        self._drip = _listener()
        # Listening, never accepting: the kernel completes each handshake and takes the request
        # into its buffer, and no answer ever comes.
        self._hang = _listener(backlog=256)
        self._threads = [
            threading.Thread(target=self._serve, args=(self._garbage, self._answer_garbage)),
            threading.Thread(target=self._serve, args=(self._drip, self._answer_drip)),
        ]
        for thread in self._threads:
            thread.daemon = True
            thread.start()

    def garbage_url(self) -> str:
        return f"http://127.0.0.1:{self._garbage.getsockname()[1]}/hook/garbage-secret"

    def drip_url(self) -> str:
        return f"http://127.0.0.1:{self._drip.getsockname()[1]}/hook/drip-secret"

    def hanging_url(self, index: int) -> str:
        return f"http://127.0.0.1:{self._hang.getsockname()[1]}/hook/hang-secret-{index}"

    def close(self) -> None:
        self._stop.set()
        for sock in (self._garbage, self._drip, self._hang):
            sock.close()

    def _serve(self, listener: socket.socket, answer: Callable[[socket.socket], None]) -> None:
        listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    def _answer_garbage(self, conn: socket.socket) -> None:
        self.garbage_hits += 1
        with conn:
            conn.settimeout(5)
            try:
                conn.recv(65536)
                conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\x00\xff garbage\r\n\r\n")
            except OSError:
                pass

    def _answer_drip(self, conn: socket.socket) -> None:
        self.drip_hits += 1
        with conn:
            conn.settimeout(5)
            try:
                conn.recv(65536)
                for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n":
                    if self._stop.wait(self.drip_seconds):
                        return
                    conn.sendall(bytes([byte]))
            except OSError:
                pass


def _listener(backlog: int = 64) -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(backlog)
    return sock


def wait_until(condition: Callable[[], bool], what: str, timeout: float) -> float:
    """Seconds it took for `condition()` to hold; fails after `timeout`."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - start
