"""Webhook receivers that misbehave, on loopback: one answers a non-HTTP banner, one drips its
answer one byte every few seconds, and one port accepts connections and never answers; and the
scenario both notifier modes are held to (`victim_is_served`)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import httpx

from orchestrator.notifier import NOT_DELIVERED
from tests.factories import job_spec
from tests.support.webhook_receiver import Receiver

# The bound the issue sets: another user's notification within 10 s of its event.
NOTIFIED_WITHIN = 10.0


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


def hostile_urls(hostile: HostileReceivers) -> list[str]:
    return [
        hostile.garbage_url(),
        hostile.drip_url(),
        *(hostile.hanging_url(index) for index in range(20)),
    ]


def submit_hooked_jobs(client: httpx.Client, urls: list[str], name: str) -> list[str]:
    """Jobs of at most 5 webhooks each, cancelled at once: each cancel notifies every hook."""
    ids = []
    for start in range(0, len(urls), 5):
        spec = job_spec(name=f"{name}-{start}", notify={"webhooks": urls[start : start + 5]})
        created = client.post("/api/v1/jobs", json=spec)
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        assert client.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 200
        ids.append(job_id)
    return ids


def victim_is_served(
    attacker: httpx.Client, victim: httpx.Client, hostile: HostileReceivers, receiver: Receiver
) -> dict[str, float]:
    """The attacker's hooks get busy; then the victim's notification and job. Returns figures."""
    attacker_jobs = submit_hooked_jobs(attacker, hostile_urls(hostile), "attack")
    wait_until(lambda: hostile.drip_hits > 0 and hostile.garbage_hits > 0, "hostile POSTs", 60)

    spec = job_spec(name="victim-note", notify={"webhooks": [receiver.url()]})
    job_id = victim.post("/api/v1/jobs", json=spec).json()["id"]
    assert victim.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 200
    notified = wait_until(
        lambda: any(body["job_id"] == job_id for body in receiver.received),
        "the victim's notification",
        NOTIFIED_WITHIN,
    )

    run = victim.post("/api/v1/jobs", json=job_spec(name="victim-run", total_steps=5))
    run_id = run.json()["id"]
    admitted = wait_until(
        lambda: victim.get(f"/api/v1/jobs/{run_id}").json()["state"] != "queued",
        "the victim's job admitted",
        NOTIFIED_WITHIN,
    )

    # The garbage receiver's row was counted as a failed try, in words that say nothing more.
    def garbage_retried() -> bool:
        events = attacker.get(f"/api/v1/jobs/{attacker_jobs[0]}/events").json()
        return any(e["kind"] == "notification_retry" for e in events)

    wait_until(garbage_retried, "a retry event of the attacker's rows", 60)
    retries = [
        e["message"]
        for e in attacker.get(f"/api/v1/jobs/{attacker_jobs[0]}/events").json()
        if e["kind"] == "notification_retry"
    ]
    assert all(NOT_DELIVERED in message for message in retries), retries
    assert not any("secret" in message for message in retries)
    return {"notified": notified, "admitted": admitted}
