"""Supervisors this test process started: wait for their sessions to end and for them to exit,
so none outlives its test.

A session's supervisor writes status.json and then exits; a test that stops as soon as the status
is written would leave the supervisor's Popen alive at interpreter exit (a ResourceWarning).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import psutil

from orchestrator.backends.local import sessions, warm
from orchestrator.backends.local.supervisor import SessionExit

SUPERVISOR_MODULE = "orchestrator.backends.local.supervisor"


def session_end(root: Path, timeout: float = 120) -> SessionExit:
    """Wait until the session at `root` has finished; how it ended. A supervisor that died
    without writing its status fails the test."""
    deadline = time.monotonic() + timeout  # a hang guard, far above any session of the tests
    while (state := sessions.session_state(root)) is not sessions.SessionState.FINISHED:
        assert state is not sessions.SessionState.LOST, "the supervisor died without a status"
        assert time.monotonic() < deadline, state
        time.sleep(0.05)
    ended = SessionExit.read(root)
    assert ended is not None
    return ended


def running_supervisors(roots: Iterable[Path] | None = None) -> list[psutil.Process]:
    """Supervisors this process started, cold (its children) or warm (its warm host's); only
    those of sessions under `roots` if given. A supervisor runs in its session's root."""
    wanted = None if roots is None else {str(Path(root).resolve()) for root in roots}
    found = []
    for child in _started_here():
        try:
            if wanted is None or child.cwd() in wanted:
                found.append(child)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def _started_here() -> list[psutil.Process]:
    started = []
    for child in psutil.Process().children():
        try:
            if SUPERVISOR_MODULE in child.cmdline():
                started.append(child)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    host = warm.shared_host().pid
    if host is not None:
        with contextlib.suppress(psutil.NoSuchProcess):
            started.extend(psutil.Process(host).children())
    return started


def wait_for_supervisors(
    roots: Iterable[Path] | None = None, timeout: float = 30
) -> list[psutil.Process]:
    """Wait until those supervisors have exited; returns the ones still running after `timeout`."""
    _, alive = psutil.wait_procs(running_supervisors(roots), timeout=timeout)
    return alive


def end_leftover_supervisors(timeout: float = 30) -> None:
    """At the end of the run: stop any supervisor still running (and its session); say so."""
    leftovers = wait_for_supervisors(timeout=timeout)
    for process in leftovers:
        print(f"a session supervisor outlived its test: {process.cmdline()}", file=sys.stderr)
        process.terminate()  # the supervisor's SIGTERM handler kills its session
    psutil.wait_procs(leftovers, timeout=timeout)
    # The launcher's own Popen handles: reaped here, none is left to warn at interpreter exit.
    for handle in list(sessions._children.values()):
        try:
            handle.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            handle.kill()
            handle.wait()
    sessions.reap_finished()
