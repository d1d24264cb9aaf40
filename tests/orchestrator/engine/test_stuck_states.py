"""States a red team found stuck or wrong, each pinned by a test on the fake backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from orchestrator.backends.base import Collected, LaunchRequest, SessionStatus
from orchestrator.db import Database
from orchestrator.models import Checkpoint, Event
from tests.support.clock import ManualClock
from tests.support.engine_runs import fake_engine, job_and_segments, submit_jobs, tick
from tests.support.fake_backend import STATE_FILE, FakeBackend, uninterrupted_digest


class LongWindedBackend(FakeBackend):
    """Every session fails with a 3,000-character reason."""

    def collect(self, handle: str, store: Path) -> Collected:
        super().collect(handle, store.with_name("ignored"))
        return Collected(None, None, None, 1.0, "x" * 3000)


@pytest.fixture
def db(migrated_db: Database) -> Database:
    return migrated_db


def test_a_3000_character_reason_fails_the_job_instead_of_looping(
    db: Database, tmp_path: Path
) -> None:
    clock = ManualClock()
    backend = LongWindedBackend(tmp_path / "fake", poll_seconds=1, clock=clock.seconds)
    engine = fake_engine(db, backend, tmp_path / "checkpoints", clock=clock)
    (job_id,) = submit_jobs(engine, 1, retry={"max_failures": 0})
    tick(engine, clock, 10)
    job, segments = job_and_segments(db, job_id)
    assert job.state == "failed"
    assert job.reason is not None
    assert job.reason.startswith("1 consecutive failed segments; last: xxx")
    assert [s.state for s in segments] == ["failed"]
    assert segments[0].error is not None
    assert len(segments[0].error) <= 2000


class CorruptingBackend(FakeBackend):
    """Segment 1's checkpoint rots on disk right after it was collected and verified."""

    def collect(self, handle: str, store: Path) -> Collected:
        collected = super().collect(handle, store)
        if handle.endswith("-0001"):
            (store / STATE_FILE).write_text(json.dumps({"value": "0" * 64}))
        return collected


def test_a_corrupt_newest_checkpoint_falls_back_to_the_older_one(
    db: Database, tmp_path: Path
) -> None:
    clock = ManualClock()
    backend = CorruptingBackend(tmp_path / "fake", poll_seconds=1, clock=clock.seconds)
    engine = fake_engine(db, backend, tmp_path / "checkpoints", clock=clock)
    (job_id,) = submit_jobs(engine, 1, total_steps=30)
    tick(engine, clock, 30)

    job, segments = job_and_segments(db, job_id)
    assert job.state == "succeeded"
    assert [(s.start_step, s.end_step) for s in segments] == [(0, 10), (10, 20), (10, 20), (20, 30)]
    with db.transaction() as session:
        rejected = session.scalars(
            select(Checkpoint.segment_index).where(Checkpoint.rejected.is_not(None))
        ).all()
        events = session.scalars(select(Event.kind).where(Event.job_id == job_id)).all()
        final = session.scalars(select(Checkpoint).where(Checkpoint.step == 30)).one()
    assert rejected == [1]
    assert events.count("checkpoint_rejected") == 1
    # No session was ever handed the corrupt checkpoint.
    assert all(
        s.launch_spec.get("expect", {}) != {"job_id": job_id, "segment_index": 1, "step": 20}
        for s in segments
    )
    assert final.model_digest == uninterrupted_digest(30)


class EndlessBackend(FakeBackend):
    """Sessions report RUNNING forever: a supervisor that lost track of its limit."""

    overrun_slack_seconds = 30.0

    def status(self, handle: str) -> SessionStatus:
        super().status(handle)
        return SessionStatus.RUNNING


def test_the_orchestrator_kills_a_session_that_outlives_its_limit(
    db: Database, tmp_path: Path
) -> None:
    clock = ManualClock()
    backend = EndlessBackend(tmp_path / "fake", poll_seconds=1, clock=clock.seconds)
    engine = fake_engine(db, backend, tmp_path / "checkpoints", clock=clock)
    (job_id,) = submit_jobs(engine, 1, retry={"max_failures": 0})  # 60 s sessions
    tick(engine, clock, 80)
    assert job_and_segments(db, job_id)[0].state == "running"
    tick(engine, clock, 20)
    job, segments = job_and_segments(db, job_id)
    assert job.state == "failed"
    assert "ran past its hard limit" in (segments[0].error or "")
    assert [c["launch_id"] for c in backend.cancels()] == [segments[0].launch_id]


class RefusingBackend(FakeBackend):
    """Every session handed segment 1's checkpoint refuses it, though the stored copy verifies
    (say, a trainer that cannot load it): a deterministic refusal, not a stale read."""

    def launch(self, request: LaunchRequest) -> str:
        handle = super().launch(request)
        if request.spec.expect is not None and request.spec.expect.segment_index == 1:
            path = self.root / "sessions" / f"{handle}.json"
            session = json.loads(path.read_text())
            path.write_text(json.dumps({**session, "rejected": "cannot load this state"}))
        return handle


def test_two_identical_refusals_fall_back_instead_of_failing_the_job(
    db: Database, tmp_path: Path
) -> None:
    clock = ManualClock()
    backend = RefusingBackend(tmp_path / "fake", poll_seconds=1, clock=clock.seconds)
    engine = fake_engine(db, backend, tmp_path / "checkpoints", clock=clock)
    (job_id,) = submit_jobs(engine, 1, total_steps=30, retry={"max_failures": 2})
    tick(engine, clock, 40)

    job, segments = job_and_segments(db, job_id)
    assert job.state == "succeeded", job.reason
    expected = [s.launch_spec["expect"]["segment_index"] for s in segments if s.index > 0]
    assert expected == [0, 1, 1, 0, 4]  # refused twice, then never offered again
    with db.transaction() as session:
        final = session.scalars(select(Checkpoint).where(Checkpoint.step == 30)).one()
    assert final.model_digest == uninterrupted_digest(30)
