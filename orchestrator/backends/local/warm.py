"""Warm starts: local sessions forked from a host interpreter that imported torch once.

A cold start runs a new interpreter for a session's supervisor, which runs another for
`python -m worker`, whose first act is to import torch: about 2.3 CPU-s, and as much of the
session's own time, every segment. A warm host is one interpreter per launching process that
imports torch once. Each launch forks the session's supervisor from it, and the supervisor forks
the session's command from itself (forked_python.py) instead of executing a new interpreter. The
processes, sessions, signals, limits, pid file and launch lock are those of a cold start
(sessions.py), in the same order; the supervisor and the command import their own code afresh.

The host runs in a session of its own and ends when its launcher closes the channel (at exit).
Supervisors it forked outlive it, as detached supervisors always did.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from orchestrator.backends.local import forked_python

_HOST = "from orchestrator.backends.local.warm import serve; import sys; serve(int(sys.argv[1]))"
_MAX_REQUEST = 1 << 20


class HostLost(OSError):
    """The warm host ended while it handled a launch: a supervisor may or may not have started."""


class WarmHost:
    """The launching side: starts the host on first use, then asks it for supervisors."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._channel: socket.socket | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start_supervisor(self, root: Path, lock_fd: int, log_fd: int) -> int:
        """Fork the supervisor of the session at `root`; its pid. It inherits `lock_fd` (the
        launch lock, held) and writes its output to `log_fd`, as a cold start's would."""
        request = json.dumps({"root": str(root), "env": dict(os.environ)}).encode()
        with self._lock:
            try:
                channel = self._connected()
                socket.send_fds(channel, [request], [lock_fd, log_fd])
            except OSError:  # the host is gone, before it saw this request: a new one
                channel = self._connected(again=True)
                socket.send_fds(channel, [request], [lock_fd, log_fd])
            try:
                reply = channel.recv(_MAX_REQUEST)
            except OSError:
                reply = b""
            if not reply:
                self.close()
                raise HostLost(f"the warm host ended while it started {root.name}")
        answer: dict[str, Any] = json.loads(reply)
        if "error" in answer:
            raise OSError(answer["error"])
        return int(answer["pid"])

    def _connected(self, *, again: bool = False) -> socket.socket:
        if again:
            self.close()
        if self._channel is None:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            with theirs:
                self._process = subprocess.Popen(
                    [sys.executable, "-c", _HOST, str(theirs.fileno())],
                    pass_fds=(theirs.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    start_new_session=True,
                )
            self._channel = ours
        return self._channel

    def close(self) -> None:
        """End the host (it ends on its own when this process does); supervisors run on."""
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self._process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=5)
            self._process = None


_shared: WarmHost | None = None
_shared_by = 0  # the process that made it: a forked child (a Celery pool's) makes its own
_shared_lock = threading.Lock()
_inherited: list[WarmHost] = []  # a parent's, in a forked child: left alone, never collected


def shared_host() -> WarmHost:
    """This process's host, started on its first launch, ended at exit."""
    global _shared, _shared_by
    with _shared_lock:
        if _shared is None or _shared_by != os.getpid():
            if _shared is not None:
                _inherited.append(_shared)
            _shared, _shared_by = WarmHost(), os.getpid()
            atexit.register(_shared.close)
        return _shared


def serve(channel_fd: int) -> None:
    """The host: preload, then fork one supervisor per request until the launcher goes away."""
    channel = socket.socket(fileno=channel_fd)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the supervisors it forks
    with contextlib.suppress(ImportError):  # an orchestrator without the worker's extra
        import torch  # noqa: F401
    forked_python.mark_preloaded()
    # Imported after the mark: a session's command imports its own copy of what it needs.
    from orchestrator.backends.local import supervisor  # noqa: F401

    while True:
        try:
            request, fds, _, _ = socket.recv_fds(channel, _MAX_REQUEST, 2)
        except ConnectionResetError:
            return
        if not request:
            return  # the launcher closed its end
        lock_fd, log_fd = fds
        answer: dict[str, int | str]
        try:
            answer = {"pid": _fork_supervisor(channel, json.loads(request), lock_fd, log_fd)}
        except OSError as exc:
            answer = {"error": f"the warm host could not fork a supervisor: {exc}"}
        finally:
            os.close(lock_fd)
            os.close(log_fd)
        channel.send(json.dumps(answer).encode())


def _fork_supervisor(
    channel: socket.socket, request: dict[str, Any], lock_fd: int, log_fd: int
) -> int:
    from orchestrator.backends.local import supervisor

    root = request["root"]

    def supervisor_in_child() -> int:
        channel.close()
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        env = {**request["env"], supervisor.LAUNCH_LOCK_FD_ENV: str(lock_fd)}
        forked_python.take_over(root, env, log_fd, unbuffered=False)
        forked_python.set_title([sys.executable, "-m", supervisor.__name__, root])
        return supervisor.main(["supervisor", root])

    # Born with its control signals blocked, as sessions.start_session's cold start is.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, supervisor.CONTROL_SIGNALS)
    try:
        return forked_python.fork_running(supervisor_in_child)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
