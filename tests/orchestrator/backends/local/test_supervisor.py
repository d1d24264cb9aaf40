"""Local sessions killed while starting up: the log shows how far they got, and no process of
theirs outlives them."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from orchestrator.backends.base import LaunchRequest, SessionStatus
from orchestrator.backends.local.backend import LocalBackend
from orchestrator.backends.local.supervisor import SupervisorPid
from tests.factories import stop_sessions
from tests.support.gates import WAITING_LOG
from tests.support.segments import make_spec, next_spec
from worker.boundary.paths import SessionPaths

pytestmark = pytest.mark.slow


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    yield LocalBackend(tmp_path / "sessions", grace_seconds=1)
    stop_sessions(tmp_path / "sessions")


def whole_log(backend: LocalBackend, handle: str) -> str:
    path = backend.log_file(handle)
    try:
        return path.read_text(errors="replace") if path is not None else ""
    except OSError:
        return ""


def wait_for_log(backend: LocalBackend, handle: str, text: str, timeout: float = 120) -> str:
    bound = time.monotonic() + timeout
    while text not in (log := whole_log(backend, handle)):
        assert backend.status(handle) is not SessionStatus.FINISHED, log[-3000:]
        assert time.monotonic() < bound, log[-3000:]
        time.sleep(0.05)
    return log


def wait_finished(backend: LocalBackend, handle: str, timeout: float = 120) -> None:
    bound = time.monotonic() + timeout
    while backend.status(handle) is not SessionStatus.FINISHED:
        assert time.monotonic() < bound, "the session never finished"
        time.sleep(0.05)


def session_processes(root: Path) -> list[psutil.Process]:
    """Live processes working in the session's directory (the worker, torchrun, its ranks),
    not counting its supervisor (known by its pid file), which exits once it has reported the
    end."""
    supervisor = SupervisorPid.read(root)
    found = []
    for process in psutil.process_iter():
        try:
            if supervisor is not None and process.pid == supervisor.pid:
                continue
            if process.cwd() == str(root) and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def processes_left(root: Path, allowed: float = 2.0) -> list[psutil.Process]:
    """The session's processes still alive `allowed` seconds after it counts as finished (the
    issue's promise: none after 2 s)."""
    bound = time.monotonic() + allowed
    while (left := session_processes(root)) and time.monotonic() < bound:
        time.sleep(0.05)
    return left


@pytest.mark.parametrize("nproc", [1, 2])
def test_a_session_killed_during_start_up_logs_its_progress_and_leaves_nothing_running(
    backend: LocalBackend, tmp_path: Path, nproc: int
) -> None:
    spec = make_spec(nproc=nproc, config={"load_gate": str(tmp_path / "never-opened")})
    handle = backend.launch(LaunchRequest("job-1-0000", spec, None))
    log = wait_for_log(backend, handle, WAITING_LOG)
    assert backend.cancel(handle)
    wait_finished(backend, handle)
    # How far start-up got is in the log, in order.
    for earlier, later in [
        ("start-up: segment 0 of job-1", "start-up: importing torch"),
        ("start-up: importing torch", "start-up: torch "),
        ("start-up: torch ", "start-up: setting up tests.support.trainers:LinearTrainer"),
    ]:
        assert log.index(earlier) < log.index(later)
    # The supervisor reaps every process of the session before it reports the end: none is
    # left by the time the session counts as finished (the issue allows 2 s).
    assert processes_left(tmp_path / "sessions" / handle) == []


def test_a_pause_during_rank_start_up_commits_and_the_job_ends_on_the_uninterrupted_digest(
    backend: LocalBackend, tmp_path: Path
) -> None:
    """nproc 2: the pause arrives while both ranks are still loading. It reaches them through the
    control file, not a signal torchrun would take for their death: the segment commits at step
    0, nothing of it is left running, and the next segment trains on to the uninterrupted
    weights."""
    gate = tmp_path / "gate"
    spec = make_spec(nproc=2, total_steps=12, config={"load_gate": str(gate)})
    handle = backend.launch(LaunchRequest("job-1-0000", spec, None))
    wait_for_log(backend, handle, WAITING_LOG)
    backend.request_stop(handle)
    root = tmp_path / "sessions" / handle
    while not SessionPaths(root).control.exists():  # the supervisor acts on the request
        time.sleep(0.05)
    gate.touch()
    wait_finished(backend, handle)
    assert processes_left(root) == []
    paused = backend.collect(handle, tmp_path / "store" / "00000")
    assert paused.problem is None, whole_log(backend, handle)
    assert paused.result is not None
    assert (paused.result.outcome, paused.result.end_step) == ("stopped", 0)
    assert paused.manifest is not None
    assert paused.manifest.step == 0

    rest = next_spec(spec, paused.result)
    resumed = backend.launch(LaunchRequest("job-1-0001", rest, tmp_path / "store" / "00000"))
    whole = backend.launch(
        LaunchRequest("whole-0000", dataclasses.replace(spec, job_id="whole"), None)
    )
    for launched in (resumed, whole):
        wait_finished(backend, launched)
    finished = backend.collect(resumed, tmp_path / "store" / "00001")
    reference = backend.collect(whole, tmp_path / "whole")
    assert finished.result is not None, finished.problem
    assert reference.result is not None, reference.problem
    assert finished.result.end_step == 12
    assert finished.result.model_digest == reference.result.model_digest


def test_a_session_too_short_for_its_start_up_says_where_it_was_cut(
    backend: LocalBackend, tmp_path: Path
) -> None:
    """Killed at its 5 s limit while its trainer is still loading: the reason says it died
    starting up, and at which stage, instead of an unexplained dropped output."""
    spec = make_spec(limit_seconds=5.0, config={"load_gate": str(tmp_path / "never-opened")})
    handle = backend.launch(LaunchRequest("job-1-0000", spec, None))
    wait_finished(backend, handle)
    collected = backend.collect(handle, tmp_path / "store" / "00000")
    assert collected.problem is not None
    assert collected.problem.startswith("the session hit its time limit during start-up (last: ")
    assert collected.problem.endswith("; its output was dropped")
