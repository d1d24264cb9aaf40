"""Supervised sessions: the hard limit, cancellation at any moment, no session without its
supervisor."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from orchestrator.backends.local.sessions import (
    SessionBusy,
    SessionState,
    cancel_session,
    clear_dead_launch,
    session_state,
    start_session,
    stop_session,
)
from orchestrator.backends.local.supervisor import SessionPlan, SupervisorPid
from orchestrator.backends.local.warm import WarmHost
from tests.support.supervisors import session_end
from worker.boundary.paths import LAUNCH_LOCK_FILE, SessionPaths
from worker.proctime import seconds_after_boot


@pytest.fixture(scope="module")
def warm_host() -> Iterator[WarmHost]:
    host = WarmHost()
    yield host
    host.close()


@pytest.fixture(params=["cold", "warm"])
def host(request: pytest.FixtureRequest, warm_host: WarmHost) -> WarmHost | None:
    """How the supervisor starts: a new interpreter, or forked from the warm host (warm.py)."""
    return warm_host if request.param == "warm" else None


def _start(root: Path, script: str, host: WarmHost | None = None, limit: float = 30.0) -> None:
    (root / "working").mkdir(parents=True)
    command = ["sh", "-c", f"echo $$ > worker.pid; {script}"]
    start_session(root, SessionPlan(command, limit, grace_seconds=1.0, env={}), host)


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


def test_a_session_over_its_limit_is_killed_and_loses_its_output(
    tmp_path: Path, host: WarmHost | None
) -> None:
    _start(tmp_path, "touch working/partial; exec sleep 30", host, limit=1.0)
    ended = session_end(tmp_path)
    # It ignores SIGTERM (as the worker does until its handler is in place): killed after the
    # grace, long before its 30 s sleep would have ended it.
    record = (ended.exit_code, ended.timed_out, ended.killed, ended.output_dropped)
    assert record == (-signal.SIGKILL, True, True, True)
    assert not ended.cancelled
    assert not (tmp_path / "working").exists()


def test_a_cancel_during_start_up_is_not_lost(tmp_path: Path, host: WarmHost | None) -> None:
    _start(tmp_path, "exec sleep 30", host)
    cancel_session(tmp_path)  # at once: the supervisor is still importing
    ended = session_end(tmp_path)
    record = (ended.exit_code, ended.cancelled, ended.killed, ended.output_dropped)
    assert record == (-signal.SIGKILL, True, True, True)


def test_a_session_gets_only_its_plans_environment_and_folder_and_its_files_are_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: WarmHost | None
) -> None:
    """The orchestrator's own secrets stay out of a session: it inherits only the basics (PATH)
    and what its plan gives it, runs in its plan's folder, and what it writes is its owner's
    alone. Ended on its own after a second (several of the supervisor's polls), its record says
    so, and nothing asked it to pause."""
    monkeypatch.setenv("BATON_SECRET_TOKEN", "orchestrator-only")
    (tmp_path / "working").mkdir()
    script = "env > seen-env; pwd > seen-folder; touch written; sleep 1; exit 0"
    plan = SessionPlan(["sh", "-c", script], 30.0, 1.0, env={"SEGMENT": "3"}, cwd="working")
    start_session(tmp_path, plan, host)
    ended = session_end(tmp_path)
    record = (ended.exit_code, ended.timed_out, ended.killed, ended.cancelled, ended.output_dropped)
    assert record == (0, False, False, False, False)
    working = tmp_path / "working"
    seen = dict(line.split("=", 1) for line in (working / "seen-env").read_text().splitlines())
    assert "BATON_SECRET_TOKEN" not in seen
    assert (seen["SEGMENT"], seen["PATH"]) == ("3", os.environ["PATH"])
    assert Path((working / "seen-folder").read_text().strip()) == working.resolve()
    assert (working / "written").stat().st_mode & 0o077 == 0
    assert not SessionPaths(tmp_path).control.exists()


def test_the_session_dies_with_its_supervisor(tmp_path: Path, host: WarmHost | None) -> None:
    _start(tmp_path, "exec sleep 30", host)
    worker_pid_file = tmp_path / "worker.pid"
    deadline = time.monotonic() + 120  # a hang guard
    while not worker_pid_file.exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    supervisor = SupervisorPid.read(tmp_path)
    assert supervisor is not None
    os.kill(supervisor.pid, signal.SIGKILL)
    assert _gone(int(worker_pid_file.read_text()))
    assert session_state(tmp_path) is SessionState.LOST


def test_a_live_session_is_known_by_a_start_that_no_clock_change_moves(tmp_path: Path) -> None:
    """The supervisor is recognised by its start as the kernel counts it from boot. Read by the
    wall clock (psutil's `create_time`: /proc/stat's boot time, whole seconds, moving with clock
    adjustments), the start the supervisor wrote and the one read a moment later can differ by
    a second, and a live session reads as lost."""
    _start(tmp_path, "exec sleep 30")
    deadline = time.monotonic() + 120  # a hang guard
    while not (tmp_path / "worker.pid").exists():  # its command runs: the record is written
        assert time.monotonic() < deadline
        time.sleep(0.05)
    record = SupervisorPid.read(tmp_path)
    assert record is not None
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    assert 0 < record.started_after_boot <= uptime
    assert session_state(tmp_path) is SessionState.RUNNING
    assert cancel_session(tmp_path)
    assert session_end(tmp_path).cancelled


def test_a_pid_record_written_before_the_upgrade_still_finds_its_live_supervisor(
    tmp_path: Path,
) -> None:
    """A session started by an orchestrator from before 2026-11-28 recorded its supervisor's
    start by the wall clock; read after the upgrade it is still that live process, not a lost
    session to launch again beside it."""
    SessionPaths(tmp_path).pid.write_text(
        json.dumps({"pid": os.getpid(), "create_time": psutil.Process().create_time()})
    )
    record = SupervisorPid.read(tmp_path)
    assert record == SupervisorPid(os.getpid(), seconds_after_boot())
    assert session_state(tmp_path) is SessionState.RUNNING


def test_a_pid_file_naming_a_foreign_process_is_not_a_running_session(tmp_path: Path) -> None:
    """After a reboot the pid in supervisor.pid may belong to an unrelated live process."""
    (tmp_path / "working").mkdir()
    # This process: alive, but started at another moment than the record says.
    SupervisorPid(os.getpid(), seconds_after_boot() - 3600).write(tmp_path)
    assert session_state(tmp_path) is SessionState.LOST
    assert not cancel_session(tmp_path)  # and it is never signalled


def test_a_starting_supervisor_is_found_before_it_has_written_its_pid(tmp_path: Path) -> None:
    """While the launch lock is held, the session counts as running: never launched again."""
    lock = os.open(tmp_path / LAUNCH_LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert session_state(tmp_path) is SessionState.RUNNING
        with pytest.raises(SessionBusy):
            clear_dead_launch(tmp_path)
    finally:
        os.close(lock)
    # The launcher died before spawning anything: the directory is free to launch again.
    (tmp_path / "input").mkdir()
    assert session_state(tmp_path) is SessionState.NOT_STARTED
    clear_dead_launch(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [LAUNCH_LOCK_FILE]


def test_a_stop_reaches_the_worker_through_its_control_file(
    tmp_path: Path, host: WarmHost | None
) -> None:
    """A graceful stop is no signal (torchrun would take it as its ranks' death): the supervisor
    writes `pause` into the control file, which the worker reads when it is ready to."""
    worker = (
        "import pathlib, time; control = pathlib.Path('control'); "
        "[time.sleep(0.05) for _ in iter(lambda: control.exists(), True)]; "
        "pathlib.Path('working/out').write_text(control.read_text())"
    )
    _start(tmp_path, f'exec {sys.executable} -c "{worker}"', host)
    assert stop_session(tmp_path)
    ended = session_end(tmp_path)
    assert (ended.exit_code, ended.output_dropped) == (0, False)
    assert (tmp_path / "working" / "out").read_text() == "pause"


@pytest.mark.parametrize("new_group", [False, True], ids=["same-group", "own-session"])
def test_no_process_of_a_session_outlives_it(
    tmp_path: Path, new_group: bool, host: WarmHost | None
) -> None:
    """A child that ignores SIGTERM (a rank still starting up) and outlives the session's main
    process, in its group or in a session of its own, is killed before the session counts as
    ended: 2 s after status.json exists, nothing of it is alive."""
    spawn = "setsid " if new_group else ""
    leftover = f"{spawn}sh -c 'trap \"\" TERM; echo $$ > leftover.pid; exec sleep 300' &"
    _start(tmp_path, f"{leftover} while [ ! -s leftover.pid ]; do sleep 0.05; done; exit 3", host)
    ended = session_end(tmp_path)
    assert ended.exit_code == 3
    pid = int((tmp_path / "leftover.pid").read_text())
    assert _gone(pid, timeout=2)


def test_a_session_outlives_the_process_group_that_launched_it(tmp_path: Path) -> None:
    """The orchestrator stopped with its whole process group (Ctrl-C in its terminal, a service
    manager's kill) takes no session with it: the supervisor runs on in a session of its own and
    the session ends as it would have."""
    (tmp_path / "working").mkdir()
    launcher = (
        "import sys; from pathlib import Path; "
        "from orchestrator.backends.local.sessions import start_session; "
        "from orchestrator.backends.local.supervisor import SessionPlan; "
        "start_session(Path(sys.argv[1]), SessionPlan(['sh', '-c', "
        "'while [ ! -e go ]; do sleep 0.05; done; touch working/done'], 60, 1.0, {})); "
        "print('started', flush=True); sys.stdin.read()"
    )
    with subprocess.Popen(
        [sys.executable, "-c", launcher, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    ) as process:
        assert process.stdout is not None
        assert process.stdout.readline() == b"started\n"
        os.killpg(process.pid, signal.SIGKILL)
    (tmp_path / "go").touch()
    ended = session_end(tmp_path)
    assert (ended.exit_code, ended.output_dropped) == (0, False)
    assert (tmp_path / "working" / "done").exists()
