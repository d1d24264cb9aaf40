"""The engine's entry point, `reconcile_job`, on the fake backend with a hand-moved clock: only
the claim's holder acts, a job is looked at only once it is due, and whatever the backend answers
the job either goes on or ends with the reason the user reads in its events."""

from __future__ import annotations

import itertools
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from orchestrator.auth import get_or_create_user
from orchestrator.backends.base import Backend, Rejected, Transient
from orchestrator.db import Database
from orchestrator.engine import Engine
from orchestrator.engine.claim import Claims
from orchestrator.engine.facade import JobNotFound
from orchestrator.lifecycle import JobState, SegmentState, UserAction
from orchestrator.models import Event, Job, Segment
from orchestrator.transitions import StaleState
from tests.support.clock import ManualClock
from tests.support.engine_runs import final_digest, job_and_segments, submit_jobs, tick
from tests.support.fake_backend import FakeBackend, uninterrupted_digest
from worker.boundary.errors import Pending


class SwitchableBackends:
    """The fake backend for every job, until `refuse` is set: then building the job's backend
    is refused, as Baton's registry refuses a Kaggle job whose owner deleted the credentials."""

    def __init__(self, backend: FakeBackend) -> None:
        self.backend = backend
        self.refuse: str | None = None

    def for_job(self, job: Job) -> Backend:
        if self.refuse is not None:
            raise Rejected(self.refuse)
        return self.backend


def _setup(
    db: Database,
    tmp_path: Path,
    faults: dict[str, list[BaseException]] | None = None,
    session_seconds: float = 5,
) -> tuple[Engine, FakeBackend, ManualClock, SwitchableBackends]:
    clock = ManualClock()
    backend = FakeBackend(
        tmp_path / "fake",
        session_seconds=session_seconds,
        poll_seconds=1,
        clock=clock.seconds,
        faults=faults,
    )
    backends = SwitchableBackends(backend)
    return Engine(db, backends, tmp_path / "checkpoints", clock=clock), backend, clock, backends


def _events(db: Database, job_id: str) -> list[tuple[str, str | None]]:
    with db.transaction() as session:
        rows = session.execute(
            select(Event.kind, Event.message).where(Event.job_id == job_id).order_by(Event.id)
        )
        return [(kind, message) for kind, message in rows]


def _set(db: Database, job_id: str, **values: Any) -> None:
    with db.transaction() as session:
        session.execute(update(Job).where(Job.id == job_id).values(**values))


def test_only_the_claims_holder_acts_on_a_job(sqlite_db: Database, tmp_path: Path) -> None:
    engine, backend, clock, _ = _setup(sqlite_db, tmp_path)
    (job_id,) = submit_jobs(engine, 1, total_steps=30)
    other = Claims(sqlite_db, clock, owner="another-orchestrator", lease_seconds=60)
    assert other.take(job_id)

    engine.reconcile_job(job_id)
    assert engine.due_job_ids() == [], "a job another orchestrator holds was due"
    tick(engine, clock, 30)
    job, segments = job_and_segments(sqlite_db, job_id)
    assert (job.state, segments, backend.calls) == ("queued", [], [])

    other.release(job_id)
    tick(engine, clock, 60)
    assert job_and_segments(sqlite_db, job_id)[0].state == "succeeded"
    assert len(backend.launches()) == 3
    assert final_digest(sqlite_db, job_id) == uninterrupted_digest(30)


def test_a_job_is_due_once_its_next_attempt_has_come_unless_it_is_held_or_finished(
    sqlite_db: Database, tmp_path: Path
) -> None:
    engine, _, clock, _ = _setup(sqlite_db, tmp_path)
    now = clock()
    ids = submit_jobs(engine, 8)
    never, later, sooner, lapsed, held, backing_off, done, cancelling = ids
    _set(sqlite_db, later, next_attempt_at=now)
    _set(sqlite_db, sooner, next_attempt_at=now - timedelta(seconds=5))
    _set(sqlite_db, lapsed, claim_owner="gone", claim_expires_at=now - timedelta(seconds=1))
    _set(sqlite_db, held, claim_owner="other", claim_expires_at=now + timedelta(seconds=1))
    _set(sqlite_db, backing_off, next_attempt_at=now + timedelta(seconds=1))
    _set(sqlite_db, done, state=JobState.SUCCEEDED.value)
    # A cancelled job whose segment is still being stopped needs looks until it has ended.
    _set(sqlite_db, cancelling, state=JobState.CANCELLED.value)
    with sqlite_db.transaction() as session:
        session.add(
            Segment(
                job_id=cancelling,
                index=0,
                state=SegmentState.CANCELLING.value,
                launch_id=f"{cancelling}-0000",
                start_step=0,
                limit_seconds=60,
                launch_spec={},
            )
        )

    assert engine.due_job_ids() == [never, lapsed, cancelling, sooner, later]
    assert engine.due_job_ids(limit=2) == [never, lapsed]
    clock.advance(1)
    assert backing_off in engine.due_job_ids()
    assert held not in engine.due_job_ids()
    clock.advance(0.001)
    assert held in engine.due_job_ids()
    assert done not in engine.due_job_ids(now + timedelta(days=1))


def test_an_outage_is_told_once_and_the_next_one_waits_from_the_start_again(
    sqlite_db: Database, tmp_path: Path
) -> None:
    outage: list[BaseException] = [Transient("503 Service Unavailable") for _ in range(5)]
    engine, backend, clock, _ = _setup(sqlite_db, tmp_path, {"status": outage}, 200)
    (job_id,) = submit_jobs(engine, 1, total_steps=10)
    tick(engine, clock, 100)
    job, _ = job_and_segments(sqlite_db, job_id)
    assert job.state == "running"
    assert job.transient_errors == 0, "a look that went through kept counting the outage"
    first = [at for name, at in backend.calls if name == "status"]
    assert [message for kind, message in _events(sqlite_db, job_id) if kind == "backend_busy"] == [
        "503 Service Unavailable"
    ]

    backend.faults["status"] = [Transient("502 Bad Gateway") for _ in range(5)]
    seen = len(first)
    tick(engine, clock, 200)
    job, _ = job_and_segments(sqlite_db, job_id)
    assert job.state == "succeeded"
    second = [at for name, at in backend.calls if name == "status"][seen - 1 :]
    gaps = [later - earlier for earlier, later in itertools.pairwise(second[:7])]
    # The second outage's first wait is a first error's again (at most 2 s), not the sixth's.
    assert gaps[1] <= 2, gaps
    assert gaps[-1] >= 16, gaps
    busy = [message for kind, message in _events(sqlite_db, job_id) if kind == "backend_busy"]
    assert busy == ["503 Service Unavailable", "502 Bad Gateway"]


def test_a_backend_still_processing_is_asked_again_at_its_pace_and_no_error_is_counted(
    sqlite_db: Database, tmp_path: Path
) -> None:
    processing: list[BaseException] = [
        Pending("the checkpoint's dataset version is processing", retry_after=7) for _ in range(4)
    ]
    engine, backend, clock, _ = _setup(sqlite_db, tmp_path, {"collect": processing})
    (job_id,) = submit_jobs(engine, 1, total_steps=10)
    tick(engine, clock, 12)
    job, _ = job_and_segments(sqlite_db, job_id)
    assert (job.state, job.transient_errors) == ("running", 0)
    tick(engine, clock, 40)
    assert job_and_segments(sqlite_db, job_id)[0].state == "succeeded"
    times = [at for name, at in backend.calls if name == "collect"]
    assert [later - earlier for earlier, later in itertools.pairwise(times)] == [7, 7, 7, 7]
    assert "backend_busy" not in [kind for kind, _ in _events(sqlite_db, job_id)]


def test_a_job_whose_backend_cannot_be_built_fails_with_why_and_its_session_is_abandoned(
    sqlite_db: Database, tmp_path: Path
) -> None:
    engine, backend, clock, backends = _setup(sqlite_db, tmp_path)
    (running,) = submit_jobs(engine, 1, total_steps=30)
    tick(engine, clock, 1)
    backends.refuse = "no Kaggle credentials are stored for the job's owner"
    tick(engine, clock, 30)

    job, [segment] = job_and_segments(sqlite_db, running)
    assert (job.state, job.reason) == ("failed", backends.refuse)
    assert segment.state == "abandoned"
    events = _events(sqlite_db, running)
    assert ("failed", backends.refuse) in events
    assert (
        "segment_abandoned",
        f"the backend cannot be reached ({backends.refuse}); segment 0 ({segment.launch_id}) "
        "may still be running on its backend until its 60 s limit",
    ) in events
    assert engine.due_job_ids() == []
    assert backend.cancels() == []


def test_a_refusal_outside_a_launch_fails_the_job_once_with_the_backends_reason(
    sqlite_db: Database, tmp_path: Path
) -> None:
    engine, _, clock, _ = _setup(
        sqlite_db, tmp_path, {"status": [Rejected("401 Unauthorized: the key was revoked")]}
    )
    (job_id,) = submit_jobs(engine, 1, total_steps=30)
    tick(engine, clock, 30)
    job, [segment] = job_and_segments(sqlite_db, job_id)
    why = "local refused: 401 Unauthorized: the key was revoked"
    assert (job.state, job.reason, segment.state) == ("failed", why, "abandoned")
    assert [kind for kind, _ in _events(sqlite_db, job_id)].count("failed") == 1
    assert "internal_error" not in [kind for kind, _ in _events(sqlite_db, job_id)]


def test_a_job_another_writer_moved_mid_visit_is_read_again_at_the_next_look(
    sqlite_db: Database, tmp_path: Path
) -> None:
    moved: list[BaseException] = [StaleState("job moved: expected running") for _ in range(2)]
    engine, _, clock, _ = _setup(sqlite_db, tmp_path, {"status": moved})
    (job_id,) = submit_jobs(engine, 1, total_steps=30)
    tick(engine, clock, 60)
    job, segments = job_and_segments(sqlite_db, job_id)
    assert job.state == "succeeded", job.reason
    assert [segment.state for segment in segments] == ["succeeded"] * 3
    assert final_digest(sqlite_db, job_id) == uninterrupted_digest(30)


def test_a_job_waiting_for_its_quota_wakes_at_the_refresh_and_not_before(
    sqlite_db: Database, tmp_path: Path
) -> None:
    engine, backend, clock, _ = _setup(sqlite_db, tmp_path)
    (job_id,) = submit_jobs(engine, 1, total_steps=10)
    refresh = clock() + timedelta(seconds=30)
    _set(sqlite_db, job_id, state=JobState.WAITING.value, wait_until=refresh)

    engine.reconcile_job(job_id)
    job, _ = job_and_segments(sqlite_db, job_id)
    assert job.next_attempt_at is not None
    assert (job.state, job.next_attempt_at.replace(tzinfo=refresh.tzinfo)) == ("waiting", refresh)
    tick(engine, clock, 29)
    assert (job_and_segments(sqlite_db, job_id)[0].state, backend.launches()) == ("waiting", [])

    clock.advance(1)
    engine.reconcile_job(job_id)
    job, [segment] = job_and_segments(sqlite_db, job_id)
    # Woken and launched in the same visit.
    assert (job.state, segment.state, job.wait_until) == ("running", "running", None)


@pytest.mark.parametrize("bug", [ValueError("bad archive"), KeyError("handle")])
def test_a_bug_while_reconciling_fails_the_job_with_internal_error_and_its_name(
    sqlite_db: Database, tmp_path: Path, bug: Exception
) -> None:
    engine, _, clock, _ = _setup(sqlite_db, tmp_path, {"status": [bug]})
    (job_id,) = submit_jobs(engine, 1, total_steps=30)
    tick(engine, clock, 30)
    job, _ = job_and_segments(sqlite_db, job_id)
    why = f"internal error ({type(bug).__name__}: {bug})"
    assert (job.state, job.reason) == ("failed", why)
    assert ("internal_error", why) in _events(sqlite_db, job_id)


@pytest.mark.parametrize(
    ("error", "told"),
    [
        (Transient("429 Too Many Requests"), "429 Too Many Requests"),
        (TimeoutError("read timed out"), "TimeoutError: read timed out"),
    ],
    ids=["transient", "network-error-let-through"],
)
def test_after_an_error_the_backend_is_asked_again_no_sooner_than_its_poll_interval(
    sqlite_db: Database, tmp_path: Path, error: Exception, told: str
) -> None:
    """Kaggle is polled every 30 s or more (its rate limits are unpublished): a first error's
    backoff (1 to 2 s) never brings the next call sooner. A network error a backend let through
    is a passing outage too, told by its kind."""
    clock = ManualClock()
    backend = FakeBackend(
        tmp_path / "fake",
        session_seconds=5,
        poll_seconds=30,
        clock=clock.seconds,
        faults={"status": [error]},
    )
    db = sqlite_db
    engine = Engine(db, SwitchableBackends(backend), tmp_path / "ckpt", clock=clock)
    (job_id,) = submit_jobs(engine, 1, total_steps=10)
    tick(engine, clock, 100)
    assert job_and_segments(db, job_id)[0].state == "succeeded"
    times = [at for name, at in backend.calls if name == "status"]
    assert times[1] - times[0] >= 30, times
    assert [m for kind, m in _events(db, job_id) if kind == "backend_busy"] == [told]


def test_another_user_can_neither_act_on_nor_move_a_job_and_is_told_it_does_not_exist(
    sqlite_db: Database, tmp_path: Path
) -> None:
    engine, _, clock, _ = _setup(sqlite_db, tmp_path)
    (job_id,) = submit_jobs(engine, 1, total_steps=30)
    with sqlite_db.transaction() as session:
        mallory = get_or_create_user(session, "mallory").id
    for action in UserAction:
        with pytest.raises(JobNotFound, match=job_id):
            engine.act(mallory, job_id, action)
    with pytest.raises(JobNotFound, match=job_id):
        engine.move(mallory, job_id, "local", None)
    tick(engine, clock, 60)
    assert job_and_segments(sqlite_db, job_id)[0].state == "succeeded"


def test_an_action_hands_back_the_job_as_it_now_is_and_a_resume_is_looked_at_at_once(
    sqlite_db: Database, tmp_path: Path
) -> None:
    engine, _, clock, _ = _setup(sqlite_db, tmp_path)
    (job_id,) = submit_jobs(engine, 1, total_steps=30)
    user_id = job_and_segments(sqlite_db, job_id)[0].user_id
    paused = engine.act(user_id, job_id, UserAction.PAUSE)
    assert isinstance(paused, Job)
    assert (paused.id, paused.state) == (job_id, "paused")
    # Paused in the middle of an hour's backoff after a run of backend errors: the user's
    # resume is acted on at the next look, not when that backoff would have ended.
    _set(sqlite_db, job_id, next_attempt_at=clock() + timedelta(hours=1))
    resumed = engine.act(user_id, job_id, UserAction.RESUME)
    assert isinstance(resumed, Job)
    assert resumed.state == "queued"
    assert engine.due_job_ids() == [job_id]


def test_a_submit_is_told_as_queued_with_each_warning_at_the_engine_s_time(
    sqlite_db: Database, tmp_path: Path
) -> None:
    engine, _, clock, _ = _setup(sqlite_db, tmp_path)
    (job_id,) = submit_jobs(
        engine, 1, backend="kaggle", kaggle={"accelerator": "p100", "quota_reserve_seconds": 0}
    )
    with sqlite_db.transaction() as session:
        rows = session.scalars(select(Event).where(Event.job_id == job_id).order_by(Event.id))
        told = [(e.kind, e.to_state, e.message, e.created_at) for e in rows]
    assert [(kind, to_state, at) for kind, to_state, _, at in told] == [
        ("submitted", "queued", clock()),
        ("warning", None, clock()),
    ]
    assert told[0][2] is None
    assert told[1][2] is not None
    assert told[1][2].startswith("P100 was retired on 2026-09-15")


def test_a_running_session_is_asked_its_status_once_a_look_at_the_backends_pace(
    sqlite_db: Database, tmp_path: Path
) -> None:
    """Each look at a running job costs one status call (on Kaggle, one API call against its
    rate limit), and the looks come at the backend's poll interval, never several at once."""
    engine, backend, clock, _ = _setup(sqlite_db, tmp_path, session_seconds=20)
    (job_id,) = submit_jobs(engine, 1, total_steps=10)
    tick(engine, clock, 10)
    job, _ = job_and_segments(sqlite_db, job_id)
    assert job.state == "running"
    times = [at for name, at in backend.calls if name == "status"]
    assert len(times) >= 5
    assert all(later - earlier >= 1 for earlier, later in itertools.pairwise(times)), times
