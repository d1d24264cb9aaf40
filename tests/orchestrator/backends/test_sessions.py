"""Supervised sessions: the hard limit, cancellation at any moment, no session without its
supervisor."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from orchestrator.backends.sessions import (
    SessionState,
    cancel_session,
    session_state,
    start_session,
)
from orchestrator.backends.supervisor import SessionExit, SessionPlan, SupervisorPid


def _start(root: Path, script: str, limit: float = 30.0) -> None:
    (root / "working").mkdir(parents=True)
    command = ["sh", "-c", f"echo $$ > worker.pid; {script}"]
    start_session(root, SessionPlan(command, limit, grace_seconds=1.0, env={}))


def _wait_finished(root: Path, timeout: float = 10) -> SessionExit:
    deadline = time.monotonic() + timeout
    while session_state(root) is not SessionState.FINISHED:
        assert time.monotonic() < deadline, session_state(root)
        time.sleep(0.05)
    ended = SessionExit.read(root)
    assert ended is not None
    return ended


def _gone(pid: int, timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_a_session_over_its_limit_is_killed_and_loses_its_output(tmp_path: Path) -> None:
    _start(tmp_path, "touch working/partial; exec sleep 30", limit=1.0)
    ended = _wait_finished(tmp_path)
    assert (ended.timed_out, ended.output_dropped, ended.cancelled) == (True, True, False)
    assert not (tmp_path / "working").exists()


def test_a_cancel_during_start_up_is_not_lost(tmp_path: Path) -> None:
    _start(tmp_path, "exec sleep 30")
    cancel_session(tmp_path)  # at once: the supervisor is still importing
    ended = _wait_finished(tmp_path)
    assert (ended.cancelled, ended.output_dropped) == (True, True)


def test_the_session_dies_with_its_supervisor(tmp_path: Path) -> None:
    _start(tmp_path, "exec sleep 30")
    worker_pid_file = tmp_path / "worker.pid"
    deadline = time.monotonic() + 10
    while not worker_pid_file.exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    supervisor = SupervisorPid.read(tmp_path)
    assert supervisor is not None
    os.kill(supervisor.pid, signal.SIGKILL)
    assert _gone(int(worker_pid_file.read_text()))
    assert session_state(tmp_path) is SessionState.LOST
