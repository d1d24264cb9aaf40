"""The local backend hands over only a checkpoint it has verified: a real session runs, then its
output (or the stored copy of it) is damaged before collect. And what a launch starts, and the
reason collect gives for every way a session can end."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.backends.base import (
    Collected,
    LaunchRequest,
    Rejected,
    SessionStatus,
    Slot,
    Transient,
)
from orchestrator.backends.local.backend import LocalBackend
from orchestrator.backends.local.sessions import start_session
from orchestrator.backends.local.supervisor import SessionExit, SessionPlan, SupervisorPid
from tests.factories import stop_sessions
from tests.support.marks import starts_processes
from tests.support.segments import make_spec
from worker.boundary.contract import READY_LOG, STARTUP_LOG, SegmentResult
from worker.boundary.heartbeat import Heartbeat
from worker.boundary.manifest import verify_checkpoint
from worker.boundary.paths import CHECKPOINT_DIR, RESULT_FILE, WORKING_DIR, SessionPaths


@pytest.fixture
@starts_processes
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    yield LocalBackend(tmp_path / "sessions", grace_seconds=1)
    stop_sessions(tmp_path / "sessions")


class RecordingBackend(LocalBackend):
    """Spawns nothing: keeps the plan of each session a launch would start."""

    def __init__(self, sessions_dir: Path, **options: object) -> None:
        super().__init__(sessions_dir, **options)  # type: ignore[arg-type]
        self.plans: list[SessionPlan] = []

    def _start(self, root: Path, plan: SessionPlan) -> None:
        self.plans.append(plan)


def _wait_finished(backend: LocalBackend, handle: str, timeout: float = 120) -> None:
    bound = time.monotonic() + timeout
    while backend.status(handle) is not SessionStatus.FINISHED:
        assert time.monotonic() < bound, "the session never finished"
        time.sleep(0.05)


def _finished_session(backend: LocalBackend) -> str:
    handle = backend.launch(LaunchRequest("job-1-0000", make_spec(total_steps=6), None))
    _wait_finished(backend, handle)
    return handle


def _assert_timed_by_its_supervisor(collected: Collected, root: Path) -> None:
    """The session's wall time is what its supervisor measured, from start to end."""
    ended = SessionExit.read(root)
    assert ended is not None
    assert collected.session_seconds == ended.ended_at - ended.started_at


def _scripted_session(
    backend: LocalBackend, handle: str, script: str, limit: float = 60.0, log: str = ""
) -> Path:
    """A session whose command is a shell script instead of the worker, so a test chooses how it
    ends; `log` is what the worker had logged before (the supervisor appends to it)."""
    root = backend.sessions_dir / handle
    SessionPaths(root).working.mkdir(parents=True)
    SessionPaths(root).log.write_text(log)
    start_session(root, SessionPlan(["sh", "-c", script], limit, grace_seconds=1.0, env={}))
    return root


def _flip_a_byte(checkpoint: Path) -> None:
    path = checkpoint / "trainer.pt"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _assert_rejected(collected: Collected) -> None:
    assert (collected.manifest, collected.checkpoint) == (None, None)
    assert collected.problem is not None
    assert collected.problem.startswith("checkpoint rejected")


def test_a_clean_session_is_collected_verified(backend: LocalBackend, tmp_path: Path) -> None:
    handle = _finished_session(backend)
    store = tmp_path / "store" / "00000"
    collected = backend.collect(handle, store)
    assert collected.problem is None
    assert collected.checkpoint == store
    assert collected.manifest == verify_checkpoint(store)
    assert collected.manifest.step == 6
    assert collected.result is not None
    assert collected.result.end_step == 6
    _assert_timed_by_its_supervisor(collected, backend.sessions_dir / handle)
    # The input's hard links are gone: a pruned checkpoint's blocks are not kept alive by them.
    assert not (backend.sessions_dir / handle / "input").exists()


def test_a_damaged_session_output_is_rejected(backend: LocalBackend, tmp_path: Path) -> None:
    handle = _finished_session(backend)
    _flip_a_byte(backend.sessions_dir / handle / "working" / CHECKPOINT_DIR)
    collected = backend.collect(handle, tmp_path / "store" / "00000")
    _assert_rejected(collected)
    # The session's result and wall time still reach the planner's estimates.
    assert collected.result is not None
    assert collected.result.end_step == 6
    _assert_timed_by_its_supervisor(collected, backend.sessions_dir / handle)


def test_a_stored_copy_damaged_before_a_repeated_collect_is_rejected(
    backend: LocalBackend, tmp_path: Path
) -> None:
    # Collect moved the checkpoint into the store, then the orchestrator died before recording
    # it; the next collect finds the stored copy, and must verify it again, not trust it.
    handle = _finished_session(backend)
    store = tmp_path / "store" / "00000"
    assert backend.collect(handle, store).problem is None
    _flip_a_byte(store)
    _assert_rejected(backend.collect(handle, store))


def test_a_checkpoint_that_is_not_the_one_the_result_names_is_rejected(
    backend: LocalBackend, tmp_path: Path
) -> None:
    handle = _finished_session(backend)
    result = backend.sessions_dir / handle / "working" / RESULT_FILE
    # result.json claims step 5; the manifest says step 6.
    result.write_text(result.read_text().replace('"end_step": 6', '"end_step": 5'))
    _assert_rejected(backend.collect(handle, tmp_path / "store" / "00000"))


def test_a_launch_runs_the_worker_under_the_segments_limit_with_the_trainer_paths_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/opt/site-trainers")  # the orchestrator's own, searched last
    first, second = tmp_path / "trainers-a", tmp_path / "trainers-b"
    backend = RecordingBackend(
        tmp_path / "sessions",
        python="/opt/py/bin/python",
        trainer_paths=[first, second],
        grace_seconds=7.0,
    )
    spec = make_spec(limit_seconds=1234.0)
    assert backend.find("job-1-0000") is None
    handle = backend.launch(LaunchRequest("job-1-0000", spec, None))
    assert handle == "job-1-0000"
    [plan] = backend.plans
    assert plan.command == ["/opt/py/bin/python", "-m", "worker", "--root", "."]
    assert (plan.limit_seconds, plan.grace_seconds) == (1234.0, 7.0)
    search = plan.env["PYTHONPATH"].split(os.pathsep)
    assert search == [str(first), str(second), os.getcwd(), "/opt/site-trainers"]
    assert plan.env["PYTHONUNBUFFERED"] == "1"
    root = tmp_path / "sessions" / handle
    assert SessionPaths(root).segment.read_text() == spec.to_json()
    for folder in (SessionPaths(root).working, SessionPaths(root).input):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700  # the session's data is its owner's


STORED_FILES = ("trainer.pt", "nested/state.json")


def _resumed_from(stored: Path, tmp_path: Path) -> tuple[RecordingBackend, Path]:
    """A stored checkpoint of two files, one nested, and the second segment launched from it:
    the backend and the checkpoint its session reads, which holds the same bytes."""
    (stored / "nested").mkdir(parents=True)
    (stored / "trainer.pt").write_bytes(b"weights")
    (stored / "nested" / "state.json").write_text("{}")
    backend = RecordingBackend(tmp_path / "sessions")
    handle = backend.launch(LaunchRequest("job-1-0001", make_spec(segment_index=1), stored))
    given = SessionPaths(tmp_path / "sessions" / handle).resume_checkpoint
    for name in STORED_FILES:
        assert (given / name).read_bytes() == (stored / name).read_bytes()
    return backend, given


def test_a_resumed_session_reads_the_stored_checkpoint_linked_not_copied(tmp_path: Path) -> None:
    stored = tmp_path / "store" / "00000"
    backend, given = _resumed_from(stored, tmp_path)
    for name in STORED_FILES:
        assert (given / name).stat().st_ino == (stored / name).stat().st_ino
    assert len(backend.plans) == 1


def test_a_checkpoint_stored_on_another_filesystem_is_copied_for_the_session(
    tmp_path: Path,
) -> None:
    """No hard link crosses filesystems: the store on another disk than the sessions (here
    /dev/shm, a tmpfs) still resumes, from a copy."""
    shm = Path("/dev/shm")  # Linux's own tmpfs, as the local backend's Linux needs
    assert shm.stat().st_dev != tmp_path.stat().st_dev, "needs /dev/shm on a filesystem of its own"
    with tempfile.TemporaryDirectory(dir=shm) as other_disk:
        _resumed_from(Path(other_disk) / "00000", tmp_path)


def test_a_launch_whose_checkpoint_is_missing_from_the_store_is_refused_and_starts_nothing(
    tmp_path: Path,
) -> None:
    backend = RecordingBackend(tmp_path / "sessions")
    missing = LaunchRequest("job-1-0001", make_spec(segment_index=1), tmp_path / "gone")
    with pytest.raises(Rejected) as refused:
        backend.launch(missing)
    assert str(refused.value) == "the checkpoint to resume from is missing from the store"
    assert backend.plans == []


def test_a_launch_id_being_launched_elsewhere_is_not_launched_again_until_that_launch_died(
    tmp_path: Path,
) -> None:
    """Another launcher holds the session's launch lock: the launch is a transient error, and
    the session is found. Once that launcher died, its leftovers are cleared and it launches."""
    backend = RecordingBackend(tmp_path / "sessions")
    root = tmp_path / "sessions" / "job-1-0000"
    SessionPaths(root).input.mkdir(parents=True)
    lock = os.open(SessionPaths(root).launch_lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with pytest.raises(Transient, match="job-1-0000"):
            backend.launch(LaunchRequest("job-1-0000", make_spec(), None))
        assert backend.find("job-1-0000") == "job-1-0000"
        assert backend.status("job-1-0000") is SessionStatus.RUNNING
    finally:
        os.close(lock)
    assert backend.plans == []
    assert backend.find("job-1-0000") is None
    (root / "input" / "left-over").write_text("x")
    (root / "session.json").write_text("{")  # a plan the dead launcher was writing
    assert backend.launch(LaunchRequest("job-1-0000", make_spec(), None)) == "job-1-0000"
    assert list(SessionPaths(root).input.iterdir()) == []
    assert not (root / "session.json").exists()
    assert len(backend.plans) == 1


def test_what_a_backend_reports_without_a_session(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "sessions", slots=3)
    assert backend.slot == Slot(f"local:{socket.gethostname()}", 3)
    assert LocalBackend(tmp_path / "sessions").slot.limit == max(1, os.cpu_count() or 1)
    assert backend.status("never-launched") is SessionStatus.LOST
    # The engine looks at a local session at the pace the operator configured.
    assert LocalBackend(tmp_path / "sessions", poll_seconds=3.0).poll_seconds == 3.0
    assert (backend.quota(), backend.queue_reason("job-1-0000")) == (None, None)


def test_progress_is_the_sessions_heartbeat_once_it_is_whole(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "sessions")
    paths = SessionPaths(tmp_path / "sessions" / "job-1-0000")
    assert backend.log_file("job-1-0000") == paths.log
    assert backend.progress("job-1-0000") is None  # nothing written yet
    paths.working.mkdir(parents=True)
    paths.heartbeat.write_text('{"step": 3, "at": 17')  # caught half-written
    assert backend.progress("job-1-0000") is None
    beat = Heartbeat(step=3, at=17.5, loss=0.25, step_seconds=0.5)
    paths.heartbeat.write_text(json.dumps(beat.to_json()))
    assert backend.progress("job-1-0000") == beat


@pytest.mark.parametrize(
    ("script", "limit", "log", "reason"),
    [
        (
            "echo 'Traceback (most recent call last):'; echo 'ValueError: boom'; exit 3",
            60.0,
            "",
            "the session ended (exit code 3) without a usable result: ValueError: boom",
        ),
        (
            "exec sleep 60",
            0.5,
            # The last stage comes from a rank, its line prefixed as torchrun prefixes them.
            f"{STARTUP_LOG} segment 0 of job-1\n{STARTUP_LOG} importing torch\n"
            f"[rank0]: {STARTUP_LOG} setting up the trainer\n",
            "the session hit its time limit during start-up (last: setting up the trainer); "
            "its output was dropped",
        ),
        (
            "exec sleep 60",
            0.5,
            f"{STARTUP_LOG} importing torch\n{STARTUP_LOG} torch 2.5\n{READY_LOG}\nstep 1\n",
            "the session hit its time limit; its output was dropped",
        ),
    ],
    ids=["crashed", "limit-in-start-up", "limit-after-start-up"],
)
def test_a_session_without_a_result_says_why(
    backend: LocalBackend, script: str, limit: float, log: str, reason: str
) -> None:
    _scripted_session(backend, "job-1-0000", script, limit, log)
    _wait_finished(backend, "job-1-0000")
    collected = backend.collect("job-1-0000", backend.sessions_dir.parent / "store" / "00000")
    assert collected.problem == reason
    assert (collected.result, collected.manifest, collected.checkpoint) == (None, None, None)
    _assert_timed_by_its_supervisor(collected, backend.sessions_dir / "job-1-0000")


def test_a_cancelled_session_is_killed_and_says_so(backend: LocalBackend) -> None:
    root = _scripted_session(backend, "job-1-0000", "touch working/partial; exec sleep 60")
    assert backend.cancel("job-1-0000")
    _wait_finished(backend, "job-1-0000")
    collected = backend.collect("job-1-0000", backend.sessions_dir.parent / "store" / "00000")
    assert collected.problem == "cancelled; its output was dropped"
    assert not SessionPaths(root).working.exists()


def test_a_session_whose_supervisor_died_is_lost_and_says_so(backend: LocalBackend) -> None:
    root = _scripted_session(backend, "job-1-0000", "echo $$ > worker.pid; exec sleep 60")
    bound = time.monotonic() + 30
    while not (root / "worker.pid").exists():
        assert time.monotonic() < bound
        time.sleep(0.05)
    supervisor = SupervisorPid.read(root)
    assert supervisor is not None
    os.kill(supervisor.pid, signal.SIGKILL)
    while backend.status("job-1-0000") is not SessionStatus.LOST:
        assert time.monotonic() < bound
        time.sleep(0.05)
    collected = backend.collect("job-1-0000", backend.sessions_dir.parent / "store" / "00000")
    assert collected.problem == "the session was lost; its output was dropped"
    assert collected.session_seconds is None


@pytest.mark.parametrize(
    ("error", "reason"), [("ValueError: nan loss", "ValueError: nan loss"), (None, "failed")]
)
def test_a_segment_that_failed_hands_back_its_result_and_its_reason(
    backend: LocalBackend, error: str | None, reason: str
) -> None:
    result = SegmentResult("job-1", 0, "failed", 0, 0, 60.0, error=error)
    root = backend.sessions_dir / "job-1-0000"
    root.mkdir(parents=True)
    result.write(root / "prepared.json")
    _scripted_session(backend, "job-1-0000", f"cp prepared.json {WORKING_DIR}/{RESULT_FILE}")
    _wait_finished(backend, "job-1-0000")
    collected = backend.collect("job-1-0000", backend.sessions_dir.parent / "store" / "00000")
    assert collected.result == result
    assert collected.problem == reason
    _assert_timed_by_its_supervisor(collected, backend.sessions_dir / "job-1-0000")
    assert (collected.manifest, collected.checkpoint) == (None, None)
