"""The warm host: sessions forked from it are the launching process's sessions, whatever becomes
of the host."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import psutil

from orchestrator.backends.local.sessions import SessionState, session_state, start_session
from orchestrator.backends.local.supervisor import SessionPlan
from orchestrator.backends.local.warm import WarmHost
from tests.support.supervisors import session_end
from worker.boundary.paths import SessionPaths


def _start(root: Path, host: WarmHost, code: str) -> int:
    SessionPaths(root).working.mkdir(parents=True)
    plan = SessionPlan([sys.executable, "-c", code], 60.0, 1.0, env={})
    return start_session(root, plan, host)


def test_a_killed_host_is_replaced_and_its_sessions_run_on(tmp_path: Path) -> None:
    host = WarmHost()
    try:
        gate = tmp_path / "gate"
        code = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)"
        _start(tmp_path / "first", host, code)
        first_host = host.pid
        assert first_host is not None
        os.kill(first_host, signal.SIGKILL)
        psutil.Process(first_host).wait(timeout=30)

        _start(tmp_path / "second", host, "print('second')")

        assert host.pid not in (None, first_host)
        assert session_end(tmp_path / "second").exit_code == 0
        assert session_state(tmp_path / "first") is SessionState.RUNNING  # not the host's child
        gate.touch()
        assert session_end(tmp_path / "first").exit_code == 0
    finally:
        host.close()


def test_the_host_ends_with_its_launcher_and_leaves_its_sessions_running(tmp_path: Path) -> None:
    host = WarmHost()
    gate = tmp_path / "gate"
    code = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)"
    _start(tmp_path / "session", host, code)
    host_pid = host.pid
    assert host_pid is not None

    host.close()  # what the launcher's exit does: its end of the channel closes

    assert not psutil.pid_exists(host_pid)
    assert session_state(tmp_path / "session") is SessionState.RUNNING
    gate.touch()
    assert session_end(tmp_path / "session").exit_code == 0
