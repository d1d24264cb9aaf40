"""The watch phase of a running segment (engine/watch.py), on the fake backend and a manual clock:
a pause asks the session to stop once, a session is collected only once it ended, what it
measured is kept for the next plan, a session waiting in the backend's queue says why, a
heartbeat is shown and a stalled one noted once, and a diverged job rolls back once."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from orchestrator.backends.base import Collected, Gone, Rejected, SessionStatus
from orchestrator.db import Database
from orchestrator.engine import Engine
from orchestrator.lifecycle import UserAction
from orchestrator.models import Checkpoint, Event
from orchestrator.webhooks import STALLED_EVENT
from tests.support.clock import ManualClock
from tests.support.engine_runs import fake_engine, final_digest, job_and_segments, submit_jobs, tick
from tests.support.fake_backend import FakeBackend, uninterrupted_digest
from worker.boundary.contract import SegmentResult, Timings
from worker.boundary.errors import BackendError
from worker.boundary.heartbeat import Heartbeat


@pytest.fixture
def db(sqlite_db: Database) -> Database:
    return sqlite_db


def _engine(db: Database, backend: FakeBackend, tmp_path: Path, clock: ManualClock) -> Engine:
    return fake_engine(db, backend, tmp_path / "checkpoints", clock=clock)


def _events(db: Database, job_id: str, kind: str) -> list[tuple[int | None, str | None]]:
    with db.transaction() as session:
        rows = session.execute(
            select(Event.segment_index, Event.message)
            .where(Event.job_id == job_id, Event.kind == kind)
            .order_by(Event.id)
        ).all()
    return [(index, message) for index, message in rows]


def _calls(backend: FakeBackend, method: str) -> int:
    return [name for name, _ in backend.calls].count(method)


class StopRecordingBackend(FakeBackend):
    """Records which session each stop request was for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stops: list[str] = []

    def request_stop(self, handle: str) -> None:
        super().request_stop(handle)
        self.stops.append(handle)


def test_a_pause_asks_the_running_session_to_stop_once_and_the_resume_continues_exactly(
    db: Database, tmp_path: Path
) -> None:
    clock = ManualClock()
    backend = StopRecordingBackend(
        tmp_path / "fake", session_seconds=10, poll_seconds=1, clock=clock.seconds
    )
    engine = _engine(db, backend, tmp_path, clock)
    (job_id,) = submit_jobs(engine, 1, total_steps=30)
    tick(engine, clock, 3)
    job, _ = job_and_segments(db, job_id)
    engine.act(job.user_id, job_id, UserAction.PAUSE)
    tick(engine, clock, 5)
    # Asked once, however often the running session is looked at; never collected while it runs.
    assert backend.stops == [job_and_segments(db, job_id)[1][0].handle]
    assert _calls(backend, "collect") == 0
    assert [s.stop_requested for s in job_and_segments(db, job_id)[1]] == [True]
    tick(engine, clock, 10)

    job, segments = job_and_segments(db, job_id)
    assert job.state == "paused"
    assert [(s.state, s.end_step) for s in segments] == [("succeeded", 10)]
    assert _calls(backend, "request_stop") == 1
    assert [index for index, _ in _events(db, job_id, "stop_requested")] == [0]
    engine.act(job.user_id, job_id, UserAction.RESUME)
    tick(engine, clock, 40)
    job, segments = job_and_segments(db, job_id)
    assert job.state == "succeeded", job.reason
    assert [s.start_step for s in segments] == [0, 10, 20]
    assert _calls(backend, "request_stop") == 1
    assert final_digest(db, job_id) == uninterrupted_digest(30)


class LosesSegmentOnesOutput(FakeBackend):
    """Segment 1's first session cannot be read back: its output is refused, or the session is
    gone from the backend altogether."""

    fault = "refused"

    def _lost(self, handle: str) -> BackendError | None:
        if not handle.endswith("-0001"):
            return None
        if self.fault == "refused":
            return Rejected("the output archive is truncated")
        return Gone("no such session")

    def status(self, handle: str) -> SessionStatus:
        lost = self._lost(handle)
        if self.fault == "session-gone" and lost is not None:
            raise lost
        return super().status(handle)

    def collect(self, handle: str, store: Path) -> Collected:
        lost = self._lost(handle)
        if lost is not None:
            raise lost
        return super().collect(handle, store)


@pytest.mark.parametrize("fault", ["refused", "output-gone", "session-gone"])
def test_a_session_whose_output_cannot_be_read_fails_and_the_retry_resumes_from_the_last_commit(
    db: Database, tmp_path: Path, fault: str
) -> None:
    clock = ManualClock()
    backend = LosesSegmentOnesOutput(
        tmp_path / "fake", session_seconds=5, poll_seconds=1, clock=clock.seconds
    )
    backend.fault = fault
    engine = _engine(db, backend, tmp_path, clock)
    (job_id,) = submit_jobs(engine, 1, total_steps=30, retry={"max_failures": 1})
    tick(engine, clock, 40)

    job, segments = job_and_segments(db, job_id)
    assert job.state == "succeeded", job.reason
    assert [(s.state, s.start_step, s.end_step) for s in segments] == [
        ("succeeded", 0, 10),
        ("failed", 10, None),
        ("succeeded", 10, 20),
        ("succeeded", 20, 30),
    ]
    assert (segments[1].error or "").startswith("the session's output is unusable: ")
    assert segments[1].outcome == "lost"
    assert final_digest(db, job_id) == uninterrupted_digest(30)


class SegmentOneRunsOn(FakeBackend):
    """Segment 1's session reports RUNNING for ever: a supervisor that lost track of its limit."""

    overrun_slack_seconds = 30.0

    def status(self, handle: str) -> SessionStatus:
        status = super().status(handle)
        return SessionStatus.RUNNING if handle.endswith("-0001") else status


def test_a_session_past_its_hard_limit_is_killed_and_the_retry_resumes_from_the_last_commit(
    db: Database, tmp_path: Path
) -> None:
    clock = ManualClock()
    backend = SegmentOneRunsOn(tmp_path / "fake", poll_seconds=1, clock=clock.seconds)
    engine = _engine(db, backend, tmp_path, clock)
    (job_id,) = submit_jobs(engine, 1, total_steps=30, retry={"max_failures": 1})  # 60 s
    tick(engine, clock, 120)

    job, segments = job_and_segments(db, job_id)
    assert job.state == "succeeded", job.reason
    assert [(s.state, s.start_step) for s in segments] == [
        ("succeeded", 0),
        ("failed", 10),
        ("succeeded", 10),
        ("succeeded", 20),
    ]
    assert (segments[1].error or "").startswith("the session ran past its hard limit")
    assert [c["launch_id"] for c in backend.cancels()] == [segments[1].launch_id]
    assert final_digest(db, job_id) == uninterrupted_digest(30)


def test_sessions_that_commit_no_new_step_fail_the_job_instead_of_chaining_forever(
    db: Database, tmp_path: Path
) -> None:
    clock = ManualClock()
    backend = FakeBackend(
        tmp_path / "fake", steps_per_session=0, poll_seconds=1, clock=clock.seconds
    )
    engine = _engine(db, backend, tmp_path, clock)
    (job_id,) = submit_jobs(engine, 1, total_steps=30, retry={"max_failures": 2})
    tick(engine, clock, 30)

    job, segments = job_and_segments(db, job_id)
    assert job.state == "failed"
    assert job.reason == "3 consecutive failed segments; last: the segment committed no new step"
    assert [(s.start_step, s.end_step) for s in segments] == [(0, 0)] * 3


class MeasuringBackend(FakeBackend):
    """Every session measured its phases, its step time and its transfer, and logged metrics."""

    def collect(self, handle: str, store: Path) -> Collected:
        collected = super().collect(handle, store)
        assert collected.result is not None
        timings = Timings(startup=2.0, load=1.0, train=10.0, save=7.0, upload=3.0, total=23.0)
        result = replace(
            collected.result,
            timings=timings,
            step_time_ema=1.0,
            metrics=[{"step": collected.result.end_step, "loss": 0.5}],
            requirements="offline",
        )
        return replace(
            collected, result=result, session_seconds=24.0, transport="orchestrator", link_bytes=42
        )


def test_what_a_session_measured_is_kept_and_plans_the_next_segment(
    db: Database, tmp_path: Path
) -> None:
    clock = ManualClock()
    backend = MeasuringBackend(tmp_path / "fake", poll_seconds=1, clock=clock.seconds)
    engine = _engine(db, backend, tmp_path, clock)
    (job_id,) = submit_jobs(engine, 1, total_steps=100)
    tick(engine, clock, 2)  # segment 0 launched, then collected and segment 1 launched

    _, segments = job_and_segments(db, job_id)
    with db.transaction() as session:
        stored = session.scalars(select(Checkpoint).where(Checkpoint.job_id == job_id)).one()
    first, second = segments[:2]
    assert (first.state, first.outcome, first.end_step) == ("succeeded", "deadline", 10)
    assert first.metrics == [{"step": 10, "loss": 0.5}]
    assert first.timings is not None
    assert {key: first.timings[key] for key in ("save", "upload", "session", "step_ema")} == {
        "save": 7.0,
        "upload": 3.0,
        "session": 24.0,
        "step_ema": 1.0,
    }
    assert (first.timings["transport"], first.timings["link_bytes"]) == ("orchestrator", 42)
    assert first.timings["checkpoint_bytes"] == stored.bytes
    assert first.timings["install_from"] == "offline"
    assert first.ended_at is not None
    estimates = second.launch_spec["estimates"]
    assert estimates["save_seconds"] >= 7.0
    assert estimates["upload_seconds"] >= 3.0
    assert estimates["exit_seconds"] >= 1.0
    assert estimates["step_seconds"] == 1.0


class QueuingBackend(FakeBackend):
    """Each session waits its first 5 s in the backend's own queue (Slurm's PENDING)."""

    def status(self, handle: str) -> SessionStatus:
        status = super().status(handle)
        if status is SessionStatus.RUNNING and self.clock() - self._launched(handle) < 5:
            return SessionStatus.QUEUED
        return status

    def queue_reason(self, handle: str) -> str | None:
        # Slurm's reason for this one session (`squeue -j HANDLE`).
        return f"Resources, segment {self._session(handle)['segment_index']}"

    def _launched(self, handle: str) -> float:
        launched: float = self._session(handle)["launched_at"]
        return launched


def test_a_session_waiting_in_the_backends_queue_shows_why_until_it_starts(
    db: Database, tmp_path: Path
) -> None:
    clock = ManualClock()
    backend = QueuingBackend(
        tmp_path / "fake", session_seconds=10, poll_seconds=1, clock=clock.seconds
    )
    engine = _engine(db, backend, tmp_path, clock)
    (job_id,) = submit_jobs(engine, 1, total_steps=30)
    tick(engine, clock, 3)
    job, segments = job_and_segments(db, job_id)
    assert (job.state, job.queue_reason) == (
        "running",
        "waiting in the queue: Resources, segment 0",
    )
    assert [s.state for s in segments] == ["running"]
    tick(engine, clock, 4)
    job, segments = job_and_segments(db, job_id)
    assert (job.state, job.queue_reason) == ("running", None)
    assert [s.state for s in segments] == ["running"]
    assert _calls(backend, "collect") == 0


class FreezingBackend(FakeBackend):
    """A session's heartbeat advances a step a second for 5 s, then never again (hung)."""

    def progress(self, handle: str) -> Heartbeat | None:
        super().progress(handle)
        session = self._session(handle)
        launched: float = session["launched_at"]
        seconds = int(min(self.clock() - launched, 5))
        step = session["start"] + seconds
        return Heartbeat(step=step, at=launched + seconds, loss=0.5, step_seconds=1.0)


def test_a_running_sessions_heartbeat_is_shown_and_one_that_stops_is_noted_stalled_once(
    db: Database, tmp_path: Path
) -> None:
    clock = ManualClock()
    backend = FreezingBackend(
        tmp_path / "fake", session_seconds=100, poll_seconds=1, clock=clock.seconds
    )
    engine = _engine(db, backend, tmp_path, clock)
    # Stalled past max(hang_floor_seconds 20, 10 x the 1 s step time).
    watchdog = {"hang_floor_seconds": 20.0}
    jobs = submit_jobs(engine, 2, session={"limit_seconds": 200, "watchdog": watchdog})
    tick(engine, clock, 4)
    for job_id in jobs:
        progress = job_and_segments(db, job_id)[1][0].progress
        assert Heartbeat.from_json(progress) == Heartbeat(3, clock.seconds() - 1, 0.5, 1.0)
    tick(engine, clock, 21)  # the last beat (step 5) is 20 s old: not yet stalled
    assert [_events(db, job_id, STALLED_EVENT) for job_id in jobs] == [[], []]
    tick(engine, clock, 10)
    # Noted once for each job and segment, however often it is looked at.
    stalled = [(0, "no heartbeat for 21 s (step 5)")]
    assert [_events(db, job_id, STALLED_EVENT) for job_id in jobs] == [stalled, stalled]
    for job_id in jobs:
        progress = job_and_segments(db, job_id)[1][0].progress
        assert Heartbeat.from_json(progress) == Heartbeat(5, clock.seconds() - 30, 0.5, 1.0)
    tick(engine, clock, 100)  # segment 0 ended at 100 s; segment 1 stalls 26 s after its start
    stalled.append((1, "no heartbeat for 21 s (step 15)"))
    assert [_events(db, job_id, STALLED_EVENT) for job_id in jobs] == [stalled, stalled]


class DivergingBackend(FakeBackend):
    """The sessions named by launch id go non-finite: stopped, nothing committed."""

    diverge: frozenset[str] = frozenset()

    def collect(self, handle: str, store: Path) -> Collected:
        if handle not in self.diverge:
            return super().collect(handle, store)
        session = self._session(handle)
        start = session["start"]
        error = f"diverged at step {start + 2}; last good checkpoint at step {start}"
        result = SegmentResult(
            job_id=session["job_id"],
            segment_index=session["segment_index"],
            outcome="diverged",
            start_step=start,
            end_step=start,
            limit_seconds=session["limit_seconds"],
            error=error,
        )
        return Collected(result, None, None, 1.0, error)


def test_a_diverged_job_rolls_back_once_with_another_seed_counting_only_its_own_rollbacks(
    db: Database, tmp_path: Path
) -> None:
    clock = ManualClock()
    rollback = {"limit_seconds": 60, "watchdog": {"on_divergence": "rollback"}}
    backend = DivergingBackend(tmp_path / "fake", poll_seconds=1, clock=clock.seconds)
    engine = _engine(db, backend, tmp_path, clock)
    twice, once = submit_jobs(engine, 2, total_steps=30, seed=7, session=rollback)
    # Both jobs' segment 1 diverges; after its rollback the first job's segment 3 does too.
    backend.diverge = frozenset({f"{twice}-0001", f"{twice}-0003", f"{once}-0001"})
    tick(engine, clock, 40)

    job, segments = job_and_segments(db, once)
    assert job.state == "succeeded", job.reason
    assert [(s.outcome, s.start_step, s.launch_spec["seed"]) for s in segments] == [
        ("deadline", 0, 7),
        ("diverged", 10, 7),
        ("deadline", 10, 8),  # resumed from the last good checkpoint with another seed
        ("completed", 20, 8),
    ]
    assert [message for _, message in _events(db, once, "rolled_back")] == [
        "diverged at step 12; last good checkpoint at step 10; "
        "resuming from it once with a different data-order seed"
    ]
    job, segments = job_and_segments(db, twice)
    assert (job.state, job.reason) == (
        "failed",
        "diverged at step 22; last good checkpoint at step 20",
    )
    assert [s.outcome for s in segments] == ["deadline", "diverged", "deadline", "diverged"]
    assert len(_events(db, twice, "rolled_back")) == 1
