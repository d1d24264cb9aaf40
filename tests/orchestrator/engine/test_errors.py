"""The error contract at the engine: whatever a backend raises, a job progresses or fails with a
reason. No segment is left stuck, no error is logged once per tick, and Retry-After is honoured."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import pytest
from sqlalchemy import select

from orchestrator.backends.base import Transient
from orchestrator.db import Database
from orchestrator.engine import Engine
from orchestrator.lifecycle import ACTIVE_SEGMENT_STATES, UserAction
from orchestrator.models import Event
from tests.support.clock import ManualClock
from tests.support.engine_runs import fake_engine, job_and_segments, submit_jobs, tick
from tests.support.fake_backend import FakeBackend

METHODS = ["quota", "find", "launch", "status", "progress", "collect"]
BUGS = [ValueError("bad archive"), RuntimeError("boom"), AttributeError("'NoneType' has no x")]


@pytest.fixture
def db(sqlite_db: Database) -> Database:
    return sqlite_db


def _setup(
    db: Database, tmp_path: Path, faults: dict[str, list[BaseException]]
) -> tuple[Engine, FakeBackend, ManualClock, str]:
    clock = ManualClock()
    backend = FakeBackend(
        tmp_path / "fake", session_seconds=5, poll_seconds=1, clock=clock.seconds, faults=faults
    )
    engine = fake_engine(db, backend, tmp_path / "checkpoints", clock=clock)
    (job_id,) = submit_jobs(engine, 1, total_steps=30)
    return engine, backend, clock, job_id


def _fresh(error: Exception, count: int) -> list[BaseException]:
    """`count` new exceptions like `error` (one raised object would carry old tracebacks)."""
    return [type(error)(*error.args) for _ in range(count)]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("bug", BUGS, ids=lambda exc: type(exc).__name__)
def test_a_bug_fails_the_job_once_with_a_reason(
    db: Database, tmp_path: Path, method: str, bug: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    engine, _, clock, job_id = _setup(db, tmp_path, {method: _fresh(bug, 100)})
    with caplog.at_level(logging.ERROR):
        tick(engine, clock, 60)
    job, segments = job_and_segments(db, job_id)
    assert job.state == "failed"
    assert job.reason is not None
    assert job.reason.startswith(f"internal error ({type(bug).__name__}: {bug}")
    assert not [s for s in segments if s.state in ACTIVE_SEGMENT_STATES], "a segment is stuck"
    # At most once for failing the job and once for giving up on its segment, never per tick.
    tracebacks = len([record for record in caplog.records if record.exc_info])
    assert 1 <= tracebacks <= 2
    with caplog.at_level(logging.ERROR):
        tick(engine, clock, 60)
    assert len([record for record in caplog.records if record.exc_info]) == tracebacks
    with db.transaction() as session:
        kinds = session.scalars(select(Event.kind).where(Event.job_id == job_id)).all()
    assert kinds.count("internal_error") == 1


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    "error",
    [TimeoutError("read timed out"), ConnectionResetError("reset by peer"), Transient("503")],
    ids=["timeout", "connection", "transient"],
)
def test_a_passing_outage_is_waited_out(
    db: Database, tmp_path: Path, method: str, error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    engine, _, clock, job_id = _setup(db, tmp_path, {method: _fresh(error, 3)})
    with caplog.at_level(logging.WARNING):
        tick(engine, clock, 200)
    job, segments = job_and_segments(db, job_id)
    assert job.state == "succeeded", job.reason
    assert [s.state for s in segments] == ["succeeded"] * 3
    assert not [record for record in caplog.records if record.exc_info]


@pytest.mark.parametrize("method", ["status", "quota", "find"])
def test_retry_after_is_honoured(db: Database, tmp_path: Path, method: str) -> None:
    rate_limited: list[BaseException] = [
        Transient("429 Too Many Requests", retry_after=30) for _ in range(4)
    ]
    engine, backend, clock, job_id = _setup(db, tmp_path, {method: rate_limited})
    tick(engine, clock, 400)
    assert job_and_segments(db, job_id)[0].state == "succeeded"
    times = [at for name, at in backend.calls if name == method]
    # The first five calls are the four answered 429 and the one after them.
    gaps = [later - earlier for earlier, later in itertools.pairwise(times[:5])]
    assert len(gaps) == 4
    assert all(gap >= 30 for gap in gaps), gaps


def test_a_cancel_that_the_backend_refuses_to_carry_out_still_ends(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine, _, clock, job_id = _setup(db, tmp_path, {"cancel": _fresh(ValueError("cannot"), 100)})
    tick(engine, clock, 3)
    engine.act(job_and_segments(db, job_id)[0].user_id, job_id, UserAction.CANCEL)
    with caplog.at_level(logging.ERROR):
        tick(engine, clock, 20)
    job, segments = job_and_segments(db, job_id)
    assert job.state == "cancelled"
    assert [s.state for s in segments] == ["abandoned"]
    assert len([record for record in caplog.records if record.exc_info]) == 1


def test_the_wait_grows_with_each_consecutive_error_then_the_job_goes_on(
    db: Database, tmp_path: Path
) -> None:
    """Backoff through the engine: the job's consecutive transient errors are counted, so each
    wait is at least as long as the one before and the sixth is at least 32 s (2 s doubling,
    equal jitter: the n-th wait lies in [2^(n-1), 2^n] s), whatever the jitter draws."""
    outage: list[BaseException] = [Transient("503 Service Unavailable") for _ in range(6)]
    engine, backend, clock, job_id = _setup(db, tmp_path, {"status": outage})
    tick(engine, clock, 300)
    assert job_and_segments(db, job_id)[0].state == "succeeded"
    times = [at for name, at in backend.calls if name == "status"]
    # The first seven calls are the six answered 503 and the one after them.
    gaps = [later - earlier for earlier, later in itertools.pairwise(times[:7])]
    assert len(gaps) == 6
    assert gaps == sorted(gaps), gaps
    assert gaps[-1] >= 32, gaps
