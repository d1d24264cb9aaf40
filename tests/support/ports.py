"""Ports for the servers that tests start in another process or a later call.

A port found free by binding port 0 comes from the kernel's ephemeral range, which the kernel
also hands out as the local port of every outgoing connection (to PostgreSQL, Redis, an API
under test). Between the probe and the server's own bind, a connection made by any test
process may take it, and the server fails with "address already in use": seen with six pytest
workers, a Celery rig's API at port 37971. `free_port` hands out ports below the ephemeral
range, which no outgoing connection is given, each locked for the test process that took it
(a file lock, so no other test process, pytest-xdist worker or mutation copy, takes it while
this one runs) and checked free of listeners before it is handed out.
"""

from __future__ import annotations

import random
import socket
import tempfile
from pathlib import Path

from filelock import FileLock, Timeout

LOCKS = Path(tempfile.gettempdir()) / "baton-test-ports"
FIRST_PORT = 20000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")

_held: list[FileLock] = []  # for this process's lifetime
_random = random.Random()  # not the tests' seeded one: processes start at different places


def free_port() -> int:
    """A port no process listens on, no other test process will take while this one runs, and
    no outgoing connection will be given."""
    LOCKS.mkdir(exist_ok=True)
    ports = range(FIRST_PORT, _ephemeral_start())
    start = _random.randrange(len(ports))
    for port in [*ports[start:], *ports[:start]]:
        lock = FileLock(LOCKS / f"{port}.lock", timeout=0)
        try:
            lock.acquire()
        except Timeout:  # another test process's, or one this process handed out already
            continue
        if _listenable(port):
            _held.append(lock)
            return port
        lock.release()
    raise RuntimeError(f"no free port from {FIRST_PORT} below the ephemeral range")


def _ephemeral_start() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _listenable(port: int) -> bool:
    """Whether a server could listen on `port` now (as servers do, past a closed connection's
    TIME_WAIT)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
