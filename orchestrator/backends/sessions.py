"""Start and watch supervised sessions on this machine: the local backend's and emulator's runner.

A session is a directory laid out like a Kaggle session: `input/` (read-only data, the resume
checkpoint), `working/` (output), plus the supervisor's `session.json`, `status.json`, `log.txt`.
"""

from __future__ import annotations

import enum
import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from orchestrator.backends.supervisor import (
    CONTROL_SIGNALS,
    LOG_FILE,
    PID_FILE,
    SESSION_FILE,
    SessionExit,
    SessionPlan,
)

# Popen handles of supervisors this process started, kept so that they are reaped on exit.
_children: dict[int, subprocess.Popen[bytes]] = {}


class SessionState(enum.StrEnum):
    NOT_STARTED = "not_started"
    RUNNING = "running"
    FINISHED = "finished"
    LOST = "lost"  # the supervisor died without writing status.json


def start_session(root: Path, plan: SessionPlan) -> int:
    """Write the plan and start a detached supervisor for it; returns the supervisor's pid."""
    reap_finished()
    (root / SESSION_FILE).write_text(json.dumps(asdict(plan), indent=2))
    # The supervisor is born with its control signals blocked (a child inherits the mask) and
    # unblocks them once its handlers are in place: a cancel sent while it starts up waits for
    # the handler instead of killing it before it could kill the session.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, CONTROL_SIGNALS)
    try:
        with open(root / LOG_FILE, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "orchestrator.backends.supervisor", str(root)],
                cwd=root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    _children[proc.pid] = proc
    (root / PID_FILE).write_text(str(proc.pid))
    return proc.pid


def reap_finished() -> None:
    """Collect the exit status of supervisors this process started that have ended."""
    for pid, child in list(_children.items()):
        if child.poll() is not None:
            del _children[pid]


def _supervisor_pid(root: Path) -> int | None:
    try:
        return int((root / PID_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return None


def _alive(pid: int) -> bool:
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        del _children[pid]
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            # Field 3 is the state; a zombie has exited even though its pid still answers.
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def session_state(root: Path) -> SessionState:
    pid = _supervisor_pid(root)
    if SessionExit.read(root) is not None:
        reap_finished()
        return SessionState.FINISHED
    if pid is None:
        return SessionState.NOT_STARTED
    if _alive(pid):
        return SessionState.RUNNING
    # It may have written status.json between the two reads.
    return SessionState.FINISHED if SessionExit.read(root) else SessionState.LOST


def _signal_supervisor(root: Path, sig: signal.Signals) -> bool:
    pid = _supervisor_pid(root)
    if pid is None or not _alive(pid):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def cancel_session(root: Path) -> bool:
    """Kill the session; its output is dropped. False if it was not running."""
    return _signal_supervisor(root, signal.SIGTERM)


def stop_session(root: Path) -> bool:
    """Ask the session to stop gracefully: the worker commits a checkpoint and exits."""
    return _signal_supervisor(root, signal.SIGUSR1)
