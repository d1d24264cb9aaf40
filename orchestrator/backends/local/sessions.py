"""Start and watch supervised sessions on this machine: the local backend's and emulator's runner.

A session is a directory laid out like a Kaggle session: `input/` (read-only data, the resume
checkpoint), `working/` (output), plus the supervisor's `session.json`, `status.json`, `log.txt`.

There is no moment at which a session runs but cannot be found. The launcher takes an exclusive
lock on `launch.lock` before it spawns the supervisor and hands the locked descriptor down; the
supervisor writes `supervisor.pid` (pid and process start time) before it starts the session's
command, and only then lets go of the lock. So a directory with no pid file whose lock is free
belongs to a launch that died before anything started, and nothing else.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import psutil

from orchestrator.backends.local.supervisor import (
    CONTROL_SIGNALS,
    LAUNCH_LOCK_FD_ENV,
    SessionExit,
    SessionPlan,
    SupervisorPid,
)
from orchestrator.backends.local.warm import HostLost, WarmHost
from worker.boundary.paths import SessionPaths
from worker.proctime import seconds_after_boot

# Popen handles of supervisors this process started, kept so that they are reaped on exit.
_children: dict[int, subprocess.Popen[bytes]] = {}


class SessionState(enum.StrEnum):
    NOT_STARTED = "not_started"
    RUNNING = "running"  # or starting: the launch lock is held
    FINISHED = "finished"
    LOST = "lost"  # the supervisor died without writing status.json


class SessionBusy(Exception):
    """Another launcher holds this session's launch lock."""


def start_session(root: Path, plan: SessionPlan, host: WarmHost | None = None) -> int:
    """Write the plan and start a detached supervisor for it; returns the supervisor's pid.
    With `host`, the supervisor and a Python command of this interpreter are forked from it
    (warm.py); otherwise each is a new process.

    `root` must exist and hold no session yet (see `clear_dead_launch`).
    """
    reap_finished()
    lock_fd = os.open(SessionPaths(root).launch_lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SessionBusy(f"{root.name} is being launched by another process") from None
        SessionPaths(root).session.write_text(json.dumps(asdict(plan), indent=2))
        with open(SessionPaths(root).log, "ab") as log:
            if host is None:
                pid = _spawn_supervisor(root, lock_fd, log.fileno())
            else:
                try:
                    pid = host.start_supervisor(root, lock_fd, log.fileno())
                except HostLost as exc:  # whether a supervisor started, session_state tells
                    raise SessionBusy(str(exc)) from exc
    finally:
        # The supervisor holds the lock through its inherited copy until its pid file exists.
        os.close(lock_fd)
    # Written here too (the supervisor writes the same record), so a cancel sent the moment
    # launch returns always finds the supervisor.
    with contextlib.suppress(OSError):  # gone already
        SupervisorPid(pid, seconds_after_boot(pid)).write(root)
    return pid


def _spawn_supervisor(root: Path, lock_fd: int, log_fd: int) -> int:
    # The supervisor is born with its control signals blocked (a child inherits the mask)
    # and unblocks them once its handlers are in place: a cancel sent while it starts up
    # waits for the handler instead of killing it before it could kill the session.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, CONTROL_SIGNALS)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.backends.local.supervisor", str(root)],
            cwd=root,
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=(lock_fd,),
            env={**os.environ, LAUNCH_LOCK_FD_ENV: str(lock_fd)},
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    _children[proc.pid] = proc
    return proc.pid


def clear_dead_launch(root: Path) -> None:
    """Make `root` ready for a launch: remove what a launch that died before starting left.

    Raises SessionBusy if a launch or a session owns the directory.
    """
    if not root.exists():
        return
    if session_state(root) is not SessionState.NOT_STARTED:
        raise SessionBusy(f"{root.name} already holds a session")
    for child in root.iterdir():
        if child == SessionPaths(root).launch_lock:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def reap_finished() -> None:
    """Collect the exit status of supervisors this process started that have ended."""
    for pid, child in list(_children.items()):
        if child.poll() is not None:
            del _children[pid]


def _alive(record: SupervisorPid) -> bool:
    child = _children.get(record.pid)
    if child is not None and child.poll() is not None:
        del _children[record.pid]
        return False
    try:
        # A different start means the pid was reused by an unrelated process.
        if seconds_after_boot(record.pid) != record.started_after_boot:
            return False
        return psutil.Process(record.pid).status() != psutil.STATUS_ZOMBIE
    except (OSError, ValueError, IndexError, psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _launch_in_progress(root: Path) -> bool:
    """True while some process holds the launch lock (a supervisor that is starting)."""
    try:
        fd = os.open(SessionPaths(root).launch_lock, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing also releases a lock this probe took
    return False


def session_state(root: Path) -> SessionState:
    if SessionExit.read(root) is not None:
        reap_finished()
        return SessionState.FINISHED
    record = SupervisorPid.read(root)
    if record is None:
        if _launch_in_progress(root):
            return SessionState.RUNNING
        # The supervisor may have written its pid and let go of the lock between the two reads.
        record = SupervisorPid.read(root)
        if record is None:
            return SessionState.NOT_STARTED
    if _alive(record):
        return SessionState.RUNNING
    # It may have written status.json between the two reads.
    return SessionState.FINISHED if SessionExit.read(root) else SessionState.LOST


def _signal_supervisor(root: Path, sig: signal.Signals) -> bool:
    record = SupervisorPid.read(root)
    if record is None or not _alive(record):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, sig)
        return True
    return False


def cancel_session(root: Path) -> bool:
    """Kill the session; its output is dropped. False if it was not running."""
    return _signal_supervisor(root, signal.SIGTERM)


def stop_session(root: Path) -> bool:
    """Ask the session to stop gracefully: the worker commits a checkpoint and exits."""
    return _signal_supervisor(root, signal.SIGUSR1)
