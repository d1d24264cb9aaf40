"""The local backend: each segment is a supervised subprocess in a Kaggle-shaped directory."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from orchestrator.backends.base import (
    Collected,
    LaunchRequest,
    Quota,
    Rejected,
    SessionStatus,
    Slot,
    Transient,
)
from orchestrator.backends.local.sessions import (
    SessionBusy,
    SessionState,
    cancel_session,
    clear_dead_launch,
    session_state,
    start_session,
    stop_session,
)
from orchestrator.backends.local.supervisor import SessionExit, SessionPlan
from orchestrator.backends.local.warm import shared_host
from orchestrator.backends.log_tail import last_line, read_tail
from worker.boundary.contract import READY_LOG, STARTUP_LOG, CheckpointRef, SegmentResult
from worker.boundary.heartbeat import Heartbeat
from worker.boundary.manifest import CorruptCheckpoint, verify_checkpoint
from worker.boundary.paths import SessionPaths
from worker.reasons import one_line


def default_local_slots() -> int:
    """One session per core: each trains with its own threads, and more only thrash."""
    return max(1, os.cpu_count() or 1)


_STATUS = {
    SessionState.RUNNING: SessionStatus.RUNNING,
    SessionState.FINISHED: SessionStatus.FINISHED,
    SessionState.LOST: SessionStatus.LOST,
    SessionState.NOT_STARTED: SessionStatus.LOST,
}


def link_or_copy_tree(source: Path, target: Path) -> None:
    """Hard-link a checkpoint's files (instant, no extra space), copying across filesystems."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, target, copy_function=link)


class LocalBackend:
    name = "local"
    # The orchestrator's backstop: a session still running this long after its hard limit plus
    # the kill grace has escaped its supervisor, and is killed and failed.
    overrun_slack_seconds: float | None = 30.0

    def __init__(
        self,
        sessions_dir: Path,
        *,
        python: str | None = None,
        warm_start: bool = True,
        trainer_paths: Sequence[Path] = (),
        grace_seconds: float = 5.0,
        slots: int | None = None,
        poll_seconds: float = 1.0,
    ):
        self.sessions_dir = sessions_dir
        self.poll_seconds = poll_seconds
        self.python = python or sys.executable
        # Forked from this process's warm host (warm.py); a session of another Python is new.
        self.warm_start = warm_start
        # BATON_TRAINER_PATHS: searched first, in the order submit searched them for the trainer.
        self.trainer_paths = [str(path) for path in trainer_paths]
        self.grace_seconds = grace_seconds
        self.slot = Slot(f"local:{socket.gethostname()}", slots or default_local_slots())

    def _root(self, handle: str) -> Path:
        return self.sessions_dir / handle

    def launch(self, request: LaunchRequest) -> str:
        root = self._root(request.launch_id)
        try:
            # Only what a launch that died before its supervisor started left is removed: a
            # directory a live (or starting) supervisor owns is never touched.
            clear_dead_launch(root)
            SessionPaths(root).working.mkdir(parents=True, mode=0o700)
            SessionPaths(root).input.mkdir(mode=0o700)
        except SessionBusy as exc:
            raise Transient(str(exc)) from exc
        spec = request.spec
        if request.resume_from is not None:
            if not request.resume_from.is_dir():
                raise Rejected("the checkpoint to resume from is missing from the store")
            link_or_copy_tree(request.resume_from, SessionPaths(root).resume_checkpoint)
        SessionPaths(root).segment.write_text(spec.to_json())
        python_path = os.pathsep.join(
            filter(None, [*self.trainer_paths, os.getcwd(), os.environ.get("PYTHONPATH")])
        )
        plan = SessionPlan(
            command=[self.python, "-m", "worker", "--root", "."],
            limit_seconds=spec.limit_seconds,
            grace_seconds=self.grace_seconds,
            env={"PYTHONPATH": python_path, "PYTHONUNBUFFERED": "1"},
        )
        try:
            self._start(root, plan)
        except SessionBusy as exc:
            raise Transient(str(exc)) from exc
        return request.launch_id

    def _start(self, root: Path, plan: SessionPlan) -> None:
        """The one place a session process is spawned."""
        start_session(root, plan, shared_host() if self.warm_start else None)

    def find(self, launch_id: str) -> str | None:
        root = self._root(launch_id)
        if session_state(root) is SessionState.NOT_STARTED:
            return None
        return launch_id

    def status(self, handle: str) -> SessionStatus:
        return _STATUS[session_state(self._root(handle))]

    def collect(self, handle: str, store: Path) -> Collected:
        root = self._root(handle)
        # The input's hard links would keep a pruned checkpoint's blocks alive.
        shutil.rmtree(SessionPaths(root).input, ignore_errors=True)
        ended = SessionExit.read(root)
        seconds = ended.ended_at - ended.started_at if ended else None
        if ended is None or ended.output_dropped:
            why = "the session was lost"
            if ended is not None:
                why = "cancelled" if ended.cancelled else "the session hit its time limit"
                if ended.timed_out:
                    why += _during_start_up(root)
            return Collected(None, None, None, seconds, f"{why}; its output was dropped")
        try:
            result = SegmentResult.read(SessionPaths(root).result)
        except (OSError, ValueError, TypeError):
            # Users read one line; the traceback is in the segment's log, which only they read.
            problem = (
                f"the session ended (exit code {ended.exit_code}) without a usable result: "
                f"{one_line(last_line(SessionPaths(root).log))}"
            )
            return Collected(None, None, None, seconds, one_line(problem))
        if not result.committed:
            return Collected(result, None, None, seconds, result.error or result.outcome)
        expect = CheckpointRef(result.job_id, result.segment_index, result.end_step)
        source = SessionPaths(root).checkpoint
        try:
            if not store.exists():
                verify_checkpoint(source, expect)
                store.parent.mkdir(parents=True, exist_ok=True)
                os.replace(source, store)
            manifest = verify_checkpoint(store, expect)
        except CorruptCheckpoint as exc:
            return Collected(result, None, None, seconds, one_line(f"checkpoint rejected: {exc}"))
        return Collected(result, manifest, store, seconds, None)

    def cancel(self, handle: str) -> bool:
        cancel_session(self._root(handle))
        return True

    def request_stop(self, handle: str) -> None:
        stop_session(self._root(handle))

    def quota(self) -> Quota | None:
        return None

    def progress(self, handle: str) -> Heartbeat | None:
        return _read_heartbeat(SessionPaths(self._root(handle)).heartbeat)

    def log_file(self, handle: str) -> Path | None:
        return SessionPaths(self._root(handle)).log

    def queue_reason(self, handle: str) -> str | None:
        return None  # a local session starts at once

    def fetch_checkpoint(self, stored: Path, expect: CheckpointRef) -> int:
        return 0  # a local session's checkpoint is collected whole


def _read_heartbeat(path: Path) -> Heartbeat | None:
    try:
        return Heartbeat.from_json(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def _during_start_up(root: Path, limit: int = 16000) -> str:
    """' during start-up (last: ...)' if the worker never logged the end of its start-up: the
    session is too short for it (the planner refuses such limits once it has measured one)."""
    try:
        text = read_tail(SessionPaths(root).log, limit)
    except OSError:
        return ""
    stages = [line for line in text.splitlines() if STARTUP_LOG in line]
    if not stages or READY_LOG in stages[-1]:
        return ""
    last = stages[-1][stages[-1].index(STARTUP_LOG) + len(STARTUP_LOG) :].strip()
    return f" during start-up (last: {last})"
