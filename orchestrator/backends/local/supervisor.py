"""Session supervisor: runs one session's command under a hard time limit, like Kaggle does.

Started detached by `start_session`, it outlives the orchestrator, so a session's limit holds
even while the orchestrator is down. At the limit it sends SIGTERM to the session's process group,
then SIGKILL after the grace period. A session that hit its limit loses its output, as on Kaggle:
its `working/` is deleted. The outcome goes to `status.json`, written atomically, last.

The supervisor owns every process of its session: it is their subreaper (Linux), so a rank that
torchrun left behind, or a process that started its own group, becomes its child, and when the
session's main process has ended it kills and reaps all of them before writing `status.json`.
Nothing of a session runs on after it is collected.

Usage: python -m orchestrator.backends.local.supervisor SESSION_ROOT
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from orchestrator.backends.local.forked_python import ForkedProcess, can_fork, fork_command
from worker.boundary.contract import write_json_atomic
from worker.boundary.paths import SessionPaths
from worker.control import Command
from worker.proctime import seconds_after_boot

# The launch lock (SessionPaths.launch_lock) is held (flock) from before the supervisor is
# spawned until its pid file exists: see sessions.py. Its descriptor comes down in this variable.
LAUNCH_LOCK_FD_ENV = "BATON_LAUNCH_LOCK_FD"
_POLL_SECONDS = 0.2
# SIGTERM cancels the session, SIGUSR1 asks it to stop gracefully: the supervisor writes
# `pause` into the session's control file (worker/control.py), which the worker reads between
# steps, from before its first one. No signal: torchrun would take one as its ranks' death.
CONTROL_SIGNALS = frozenset({signal.SIGTERM, signal.SIGUSR1})
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
# How long the leftovers of an ended session get to die of SIGKILL before the supervisor stops
# waiting (a process in uninterruptible sleep); the kill was sent either way.
_REAP_SECONDS = 10.0


@dataclass(frozen=True)
class SessionPlan:
    """What the supervisor runs: written by the launcher before the supervisor starts."""

    command: list[str]
    limit_seconds: float
    grace_seconds: float
    env: dict[str, str]
    cwd: str = "."  # relative to the session root
    # A session cut at its limit keeps what it wrote (Kaggle does; the local backend does not).
    keep_output_on_timeout: bool = False

    @classmethod
    def read(cls, root: Path) -> SessionPlan:
        return cls(**json.loads(SessionPaths(root).session.read_text()))


@dataclass(frozen=True)
class SupervisorPid:
    """supervisor.pid: the supervisor's pid and start, in seconds after boot (the start guards
    against PID reuse, and no clock change moves it). Written by the supervisor before it starts
    the session, and by its launcher."""

    pid: int
    started_after_boot: float

    @classmethod
    def read(cls, root: Path) -> SupervisorPid | None:
        try:
            record = json.loads(SessionPaths(root).pid.read_text())
            if "create_time" in record:  # written before 2026-11-28: the start by the wall clock
                ticks = os.sysconf("SC_CLK_TCK")
                since_boot = round((record["create_time"] - psutil.boot_time()) * ticks) / ticks
                record = {"pid": record["pid"], "started_after_boot": since_boot}
            return cls(**record)
        except (FileNotFoundError, ValueError, TypeError, KeyError):
            return None

    def write(self, root: Path) -> None:
        write_json_atomic(SessionPaths(root).pid, asdict(self))


@dataclass(frozen=True)
class SessionExit:
    """status.json: how the session's process ended."""

    exit_code: int | None
    timed_out: bool
    killed: bool
    cancelled: bool
    started_at: float
    ended_at: float
    output_dropped: bool

    @classmethod
    def read(cls, root: Path) -> SessionExit | None:
        try:
            data: dict[str, Any] = json.loads(SessionPaths(root).status.read_text())
        except FileNotFoundError:
            return None
        return cls(**data)


# A session inherits only these from the orchestrator: never its tokens or keys.
_INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")


def _base_environment() -> dict[str, str]:
    return {key: os.environ[key] for key in _INHERITED_ENV if key in os.environ}


def _session_preexec() -> None:
    """In the session's process, before exec: ignore SIGTERM until the worker installs its stop
    handler (an ignored disposition survives exec), so a stop requested during start-up is not
    a kill; and get SIGKILL if the supervisor dies, so no session runs on without its time limit
    (Linux only; elsewhere the supervisor's own cleanup must do)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _become_subreaper() -> None:
    """Orphans of the session re-parent to the supervisor instead of init (Linux only)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1)
    except (OSError, AttributeError):
        pass


def _end_leftovers(proc: subprocess.Popen[bytes] | ForkedProcess) -> None:
    """Kill and reap whatever the session started and left running: its process group, and
    every descendant (other groups too, re-parented here as the subreaper)."""
    _signal_group(proc.pid, signal.SIGKILL)
    # Again until none is left: a rank whose parent died as it was listed is re-parented here
    # only after, and a busy machine can take a while to tear a large process down.
    bound = time.monotonic() + _REAP_SECONDS
    while (left := psutil.Process().children(recursive=True)) and time.monotonic() < bound:
        for process in left:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(left, timeout=max(0.0, bound - time.monotonic()))


class _Requests:
    """Flags set by signal handlers; the supervision loop acts on them."""

    def __init__(self) -> None:
        self.cancel = False
        self.stop = False
        signal.signal(signal.SIGTERM, self._on_cancel)
        signal.signal(signal.SIGUSR1, self._on_stop)

    def _on_cancel(self, signum: int, frame: object) -> None:
        self.cancel = True

    def _on_stop(self, signum: int, frame: object) -> None:
        self.stop = True


def _wait_until(
    proc: subprocess.Popen[bytes] | ForkedProcess, deadline: float, requests: _Requests, root: Path
) -> bool:
    """Wait for the process to exit or the deadline; True if it exited."""
    stop_written = False
    while time.monotonic() < deadline and not requests.cancel:
        if requests.stop and not stop_written:
            # A graceful stop: the worker commits at its next step boundary and exits.
            SessionPaths(root).control.write_text(Command.PAUSE.value)
            stop_written = True
        try:
            proc.wait(timeout=min(_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
            return True
        except subprocess.TimeoutExpired:
            continue
    return proc.poll() is not None


def _start_command(plan: SessionPlan, root: Path) -> subprocess.Popen[bytes] | ForkedProcess:
    """The session's process: forked where this supervisor was (warm.py), else a new one."""
    cwd = root / plan.cwd
    env = {**_base_environment(), **plan.env}
    with open(SessionPaths(root).log, "ab") as log:
        if can_fork(plan.command):
            return fork_command(plan.command, str(cwd), env, log.fileno(), _session_preexec)
        return subprocess.Popen(
            plan.command,
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_session_preexec,
        )


def supervise(root: Path, requests: _Requests) -> SessionExit:
    """Run the session to its end; SIGTERM to the supervisor cancels, SIGUSR1 asks a stop."""
    plan = SessionPlan.read(root)
    started_at = time.time()
    limit_at = time.monotonic() + plan.limit_seconds
    proc = _start_command(plan, root)
    timed_out = killed = False
    if not _wait_until(proc, limit_at, requests, root):
        if requests.cancel:
            killed = True
            _signal_group(proc.pid, signal.SIGKILL)
        else:
            timed_out = True
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=plan.grace_seconds)
            except subprocess.TimeoutExpired:
                killed = True
                _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
    _end_leftovers(proc)
    dropped = (timed_out and not plan.keep_output_on_timeout) or requests.cancel
    if dropped:
        shutil.rmtree(SessionPaths(root).working, ignore_errors=True)
    result = SessionExit(
        exit_code=proc.returncode,
        timed_out=timed_out,
        killed=killed,
        cancelled=requests.cancel,
        started_at=started_at,
        ended_at=time.time(),
        output_dropped=dropped,
    )
    write_json_atomic(SessionPaths(root).status, asdict(result))
    return result


def _announce(root: Path) -> None:
    """Write the pid file, then let go of the launch lock the launcher handed down."""
    SupervisorPid(os.getpid(), seconds_after_boot()).write(root)
    lock_fd = os.environ.pop(LAUNCH_LOCK_FD_ENV, None)
    if lock_fd is not None:
        with contextlib.suppress(OSError):
            os.close(int(lock_fd))


def main(argv: list[str]) -> int:
    os.umask(0o077)  # the session's log, output and checkpoints are its owner's alone
    # Handlers first, then the signals the launcher blocked: a cancel sent during start-up is
    # delivered now, to the handler.
    requests = _Requests()
    _become_subreaper()
    root = Path(argv[1]).resolve()
    _announce(root)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, CONTROL_SIGNALS)
    supervise(root, requests)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
