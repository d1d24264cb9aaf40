"""Launches that do not go to plan: refused for good, cancelled while in flight, and one job's
trouble never holding up the others; what a launch plans from (the job's own measured costs, a
checkpoint that verifies). All on the fake backend and a manual clock."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from orchestrator import queries
from orchestrator.auth import ADMIN_USER, get_or_create_user
from orchestrator.backends.base import (
    AccountRefused,
    Collected,
    LaunchRequest,
    Quota,
    Rejected,
    SessionStatus,
    Transient,
)
from orchestrator.backends.registry import StaticBackends
from orchestrator.db import Database
from orchestrator.engine import Engine
from orchestrator.lifecycle import ACTIVE_SEGMENT_STATES, UserAction
from orchestrator.models import Checkpoint, Event, Segment
from orchestrator.spec import MIN_SESSION_SECONDS, JobSpec
from tests.factories import kaggle_spec
from tests.support.clock import ManualClock
from tests.support.engine_runs import fake_engine, final_digest, job_and_segments, submit_jobs, tick
from tests.support.fake_backend import (
    STATE_FILE,
    FakeBackend,
    PublishingFakeBackend,
    uninterrupted_digest,
)
from worker.boundary.contract import CheckpointRef, Timings
from worker.boundary.errors import Pending
from worker.boundary.manifest import CorruptCheckpoint


@pytest.fixture
def db(sqlite_db: Database) -> Database:
    return sqlite_db


def _engine(db: Database, backend: FakeBackend, tmp_path: Path, clock: ManualClock) -> Engine:
    return fake_engine(db, backend, tmp_path / "checkpoints", clock=clock)


def _refusals(count: int) -> list[BaseException]:
    return [Rejected("machine shape NvidiaTeslaP100 is not offered") for _ in range(count)]


def test_a_launch_refused_for_good_fails_the_job_after_max_failures(
    db: Database, tmp_path: Path
) -> None:
    clock = ManualClock()
    backend = FakeBackend(
        tmp_path / "fake", poll_seconds=1, clock=clock.seconds, faults={"launch": _refusals(10)}
    )
    engine = _engine(db, backend, tmp_path, clock)
    (job_id,) = submit_jobs(engine, 1, total_steps=30, retry={"max_failures": 1})
    tick(engine, clock, 30)

    job, segments = job_and_segments(db, job_id)
    assert job.state == "failed"
    assert job.reason == (
        "2 consecutive failed segments; last: launch refused: "
        "machine shape NvidiaTeslaP100 is not offered"
    )
    assert [s.state for s in segments] == ["failed", "failed"]
    assert all((s.error or "").startswith("launch refused: machine shape") for s in segments)
    # A refusal is final for that launch: it is not pushed again under the same launch id, and
    # nothing was left running.
    assert [name for name, _ in backend.calls].count("launch") == 2
    assert backend.launches() == []
    tick(engine, clock, 30)
    assert [name for name, _ in backend.calls].count("launch") == 2


class RefusesSegmentOneOnce(FakeBackend):
    refused = False

    def launch(self, request: LaunchRequest) -> str:
        if request.spec.segment_index == 1 and not self.refused:
            self.refused = True
            raise _refusals(1)[0]
        return super().launch(request)


def test_a_refusal_counts_as_one_failure_and_the_retry_resumes_exactly(
    db: Database, tmp_path: Path
) -> None:
    clock = ManualClock()
    backend = RefusesSegmentOneOnce(tmp_path / "fake", poll_seconds=1, clock=clock.seconds)
    engine = _engine(db, backend, tmp_path, clock)
    (job_id,) = submit_jobs(engine, 1, total_steps=30, retry={"max_failures": 1})
    tick(engine, clock, 40)

    job, segments = job_and_segments(db, job_id)
    assert job.state == "succeeded", job.reason
    assert [(s.state, s.start_step) for s in segments] == [
        ("succeeded", 0),
        ("failed", 10),
        ("succeeded", 10),
        ("succeeded", 20),
    ]
    assert job.failures == 0  # the commit after the refusal reset the count
    assert final_digest(db, job_id) == uninterrupted_digest(30)


class CancelledWhileLaunching(FakeBackend):
    """The user cancels the job while the push is on the wire."""

    engine: Engine

    def launch(self, request: LaunchRequest) -> str:
        handle = super().launch(request)
        job, _ = job_and_segments(self.engine.db, request.spec.job_id)
        self.engine.act(job.user_id, job.id, UserAction.CANCEL)
        return handle


def test_a_cancel_while_the_launch_is_in_flight_stops_the_session_it_started(
    db: Database, tmp_path: Path
) -> None:
    clock = ManualClock()
    backend = CancelledWhileLaunching(
        tmp_path / "fake", session_seconds=1000, poll_seconds=1, clock=clock.seconds
    )
    engine = backend.engine = _engine(db, backend, tmp_path, clock)
    (job_id,) = submit_jobs(engine, 1)
    tick(engine, clock, 5)

    job, segments = job_and_segments(db, job_id)
    assert job.state == "cancelled"
    [segment] = segments
    assert segment.state == "cancelled"
    assert segment.handle == segment.launch_id  # the handle the push returned was kept
    assert backend.launches() == [segment.launch_id]
    assert [c["launch_id"] for c in backend.cancels()] == [segment.launch_id]
    assert backend.status(segment.launch_id) is SessionStatus.FINISHED
    tick(engine, clock, 5)
    assert backend.launches() == [segment.launch_id]


class TroubleForOneJob(FakeBackend):
    """Every call about `troubled` (a job id) raises `error`; other jobs are served normally."""

    troubled = ""
    error: type[Exception] = ValueError

    def _check(self, launch_id: str) -> None:
        if launch_id.startswith(self.troubled):
            raise self.error(f"trouble with {self.troubled}")

    def launch(self, request: LaunchRequest) -> str:
        self._check(request.launch_id)
        return super().launch(request)

    def find(self, launch_id: str) -> str | None:
        self._check(launch_id)
        return super().find(launch_id)

    def status(self, handle: str) -> SessionStatus:
        self._check(handle)
        return super().status(handle)


@pytest.mark.parametrize("error", [ValueError, Transient, Pending, Rejected, TimeoutError])
def test_one_jobs_errors_do_not_hold_up_the_others(
    db: Database, tmp_path: Path, error: type[Exception]
) -> None:
    clock = ManualClock()
    backend = TroubleForOneJob(
        tmp_path / "fake", session_seconds=5, poll_seconds=1, clock=clock.seconds
    )
    backend.error = error
    engine = _engine(db, backend, tmp_path, clock)
    troubled, *others = submit_jobs(engine, 4, total_steps=30)
    backend.troubled = troubled
    # Three 10-step segments of 5 s each, polled every second: 25 ticks are enough for a job
    # that nothing holds up.
    tick(engine, clock, 25)

    for job_id in others:
        job, segments = job_and_segments(db, job_id)
        assert job.state == "succeeded", (job.state, job.reason)
        assert final_digest(db, job_id) == uninterrupted_digest(30)
    job, segments = job_and_segments(db, troubled)
    assert not [s for s in segments if s.state in ACTIVE_SEGMENT_STATES and s.handle]
    if error is Pending:
        # Kaggle still processing: looked at every poll, never counted as an error.
        assert job.state == "running"
        assert job.transient_errors == 0
    elif error is Transient or error is TimeoutError:
        assert job.state == "running"  # waits with backoff, launching nothing
        assert job.transient_errors > 0
    else:
        assert job.state == "failed"
        assert f"trouble with {troubled}" in (job.reason or "")


class LostPushResponse(FakeBackend):
    """Kaggle's shape: the push goes through but its response is lost (the engine stores no
    handle), and a started session cannot be stopped (`cancel` says so)."""

    def launch(self, request: LaunchRequest) -> str:
        super().launch(request)
        raise TimeoutError("the read timed out after the push was sent")

    def cancel(self, handle: str) -> bool:
        self._enter("cancel")
        return False


def test_a_cancel_after_a_push_whose_response_was_lost_finds_the_session_and_keeps_its_slot(
    db: Database, tmp_path: Path
) -> None:
    """The launch ran, but the engine holds no handle for it. The cancel asks the backend what
    runs under the launch id before it calls the segment cancelled: the session is found, the
    segment is `cancelling` with its handle (its slot stays counted) until the session is seen
    to end, and nothing is pushed again."""
    clock = ManualClock()
    backend = LostPushResponse(
        tmp_path / "fake", session_seconds=60, poll_seconds=1, clock=clock.seconds
    )
    engine = _engine(db, backend, tmp_path, clock)
    (job_id,) = submit_jobs(engine, 1)
    tick(engine, clock, 1)
    job, [segment] = job_and_segments(db, job_id)
    assert (segment.state, segment.handle) == ("launching", None)
    assert backend.launches() == [segment.launch_id]

    engine.act(job.user_id, job_id, UserAction.CANCEL)
    tick(engine, clock, 5)
    _, [segment] = job_and_segments(db, job_id)
    assert (segment.state, segment.handle) == ("cancelling", segment.launch_id)
    assert segment.ended_at is None  # it has not ended: it still runs
    assert backend.status(segment.launch_id) is SessionStatus.RUNNING

    tick(engine, clock, 60)
    job, [segment] = job_and_segments(db, job_id)
    assert (job.state, segment.state) == ("cancelled", "cancelled")
    # Once seen to end, it says when, and keeps the handle its log and output are found by.
    assert segment.ended_at is not None
    assert segment.handle == segment.launch_id
    assert backend.launches() == [segment.launch_id]


class FirstPushAnswerLost(LostPushResponse):
    """The first push goes through but its answer is lost; later pushes answer."""

    lost = False

    def launch(self, request: LaunchRequest) -> str:
        if self.lost:
            return FakeBackend.launch(self, request)
        self.lost = True
        return super().launch(request)

    def cancel(self, handle: str) -> bool:
        return FakeBackend.cancel(self, handle)


def test_a_push_whose_answer_was_lost_is_found_and_adopted_never_pushed_again(
    db: Database, tmp_path: Path
) -> None:
    """No duplicate launch: the next look asks the backend what runs under the launch id before
    it pushes, finds the session, and the job goes on from it to the uninterrupted digest."""
    clock = ManualClock()
    backend = FirstPushAnswerLost(
        tmp_path / "fake", session_seconds=5, poll_seconds=1, clock=clock.seconds
    )
    engine = _engine(db, backend, tmp_path, clock)
    (job_id,) = submit_jobs(engine, 1, total_steps=20)
    tick(engine, clock, 40)

    job, segments = job_and_segments(db, job_id)
    assert job.state == "succeeded", job.reason
    assert backend.launches() == [segment.launch_id for segment in segments]
    assert segments[0].handle == segments[0].launch_id
    assert final_digest(db, job_id) == uninterrupted_digest(20)


def test_a_launch_the_account_itself_may_not_run_fails_the_job_at_once(
    db: Database, tmp_path: Path
) -> None:
    """An account refusal (a Kaggle 401) is no passing trouble: the job fails with the reason
    after one launch, not after `max_failures` more."""
    clock = ManualClock()
    refusal = AccountRefused("401 Unauthorized: the key was revoked")
    backend = FakeBackend(
        tmp_path / "fake", poll_seconds=1, clock=clock.seconds, faults={"launch": [refusal]}
    )
    engine = _engine(db, backend, tmp_path, clock)
    (job_id,) = submit_jobs(engine, 1, retry={"max_failures": 3})
    tick(engine, clock, 10)

    job, segments = job_and_segments(db, job_id)
    assert job.state == "failed"
    assert job.reason == "launch refused: 401 Unauthorized: the key was revoked"
    assert [s.state for s in segments] == ["failed"]
    assert [name for name, _ in backend.calls].count("launch") == 1


class MeasuresEachSession(FakeBackend):
    """Each session reports the costs set for its (job, segment): the worker's phase timings,
    its step time and the session's wall time. The plain fake backend reports none."""

    costs: dict[tuple[str, int], tuple[Timings, float, float]]

    def collect(self, handle: str, store: Path) -> Collected:
        collected = super().collect(handle, store)
        result = collected.result
        cost = self.costs.get((result.job_id, result.segment_index)) if result else None
        if result is None or cost is None:
            return collected
        timings, step_seconds, session_seconds = cost
        measured = replace(result, timings=timings, step_time_ema=step_seconds)
        return replace(collected, result=measured, session_seconds=session_seconds)


def _estimates(segment: Segment) -> dict[str, Any]:
    return dict(segment.launch_spec["estimates"])


def test_the_next_segment_is_planned_from_the_costs_the_jobs_own_sessions_measured(
    db: Database, tmp_path: Path
) -> None:
    """Learned estimates: each segment keeps time for the save, upload and exit that its job's
    earlier sessions measured (the worst of them, padded by a quarter) and starts from the
    latest step time."""
    clock = ManualClock()
    backend = MeasuresEachSession(tmp_path / "fake", poll_seconds=1, clock=clock.seconds)
    engine = _engine(db, backend, tmp_path, clock)
    (job_id,) = submit_jobs(engine, 1, total_steps=30)
    backend.costs = {
        # Segment 0: an 8 s save, a 4 s upload, 6 s between the worker's end and the session's.
        (job_id, 0): (Timings(startup=2, load=1, train=5, save=8, upload=4, total=20), 0.5, 26.0),
        # Segment 1: cheaper on every count, with a faster step.
        (job_id, 1): (Timings(startup=1, load=1, train=5, save=2, upload=1, total=10), 0.25, 11.0),
    }
    tick(engine, clock, 30)

    job, segments = job_and_segments(db, job_id)
    assert job.state == "succeeded", job.reason
    assert [_estimates(s) for s in segments] == [
        {
            "save_seconds": None,
            "upload_seconds": 0.0,
            "exit_seconds": 0.0,
            "step_seconds": None,
            "checkpoint_bytes": None,
        },
        {
            "save_seconds": 10.0,
            "upload_seconds": 5.0,
            "exit_seconds": 7.5,
            "step_seconds": 0.5,
            "checkpoint_bytes": None,
        },
        {
            "save_seconds": 10.0,
            "upload_seconds": 5.0,
            "exit_seconds": 7.5,
            "step_seconds": 0.25,
            "checkpoint_bytes": None,
        },
    ]
    assert final_digest(db, job_id) == uninterrupted_digest(30)


def test_one_jobs_measured_costs_never_plan_or_fail_another_job(
    db: Database, tmp_path: Path
) -> None:
    """Job A's sessions measured a start-up longer than its 60 s sessions, so A fails rather
    than chain sessions that never reach a step. Job B, submitted afterwards with the same
    spec, has measured nothing: it is planned as a first job is, launches, and finishes."""
    clock = ManualClock()
    backend = MeasuresEachSession(tmp_path / "fake", poll_seconds=1, clock=clock.seconds)
    engine = _engine(db, backend, tmp_path, clock)
    (job_a,) = submit_jobs(engine, 1, total_steps=30)
    backend.costs = {
        (job_a, 0): (Timings(startup=90, load=10, train=5, save=8, upload=4, total=120), 0.5, 126.0)
    }
    tick(engine, clock, 10)
    a, a_segments = job_and_segments(db, job_a)
    assert a.state == "failed"
    assert a.reason == (
        "sessions of 60 s are shorter than this job's measured start-up and load (100 s): "
        "raise session.limit_seconds"
    )
    assert [s.state for s in a_segments] == ["succeeded"]

    (job_b,) = submit_jobs(engine, 1, total_steps=30)
    tick(engine, clock, 30)
    b, b_segments = job_and_segments(db, job_b)
    assert b.state == "succeeded", b.reason
    assert b.failures == 0
    assert _estimates(b_segments[0]) == _estimates(a_segments[0])
    # Then only B's own sessions count: they measured nothing (the fake backend's zeros), so
    # nothing of A's 8 s save, 4 s upload and 6 s exit.
    measured_nothing = {**_estimates(a_segments[0]), "save_seconds": 0.0}
    assert [_estimates(s) for s in b_segments[1:]] == [measured_nothing, measured_nothing]
    assert final_digest(db, job_b) == uninterrupted_digest(30)


class RotsEveryCheckpoint(FakeBackend):
    """Every checkpoint rots in the store right after it was collected and verified."""

    def collect(self, handle: str, store: Path) -> Collected:
        collected = super().collect(handle, store)
        if collected.checkpoint is not None:
            (store / STATE_FILE).write_text(json.dumps({"value": "0" * 64}))
        return collected


def test_a_job_none_of_whose_checkpoints_verifies_fails_never_trained_from_scratch(
    db: Database, tmp_path: Path
) -> None:
    """Verified handoff: with no checkpoint left that verifies, the job fails with the reason;
    it neither resumes from the rotten copy nor starts again from step 0."""
    clock = ManualClock()
    backend = RotsEveryCheckpoint(tmp_path / "fake", poll_seconds=1, clock=clock.seconds)
    engine = _engine(db, backend, tmp_path, clock)
    (job_id,) = submit_jobs(engine, 1, total_steps=30, retry={"max_failures": 3})
    tick(engine, clock, 20)

    job, segments = job_and_segments(db, job_id)
    assert job.state == "failed"
    assert job.reason == "cannot resume: none of the job's 1 checkpoints verifies"
    assert _told(db, job_id, "failed") == [
        ("failed", None, "cannot resume: none of the job's 1 checkpoints verifies")
    ]
    assert [(s.state, s.start_step) for s in segments] == [("succeeded", 0)]
    assert len(backend.launches()) == 1
    with db.transaction() as session:
        [rejected] = session.scalars(select(Checkpoint.rejected)).all()
    assert rejected is not None  # the rotten copy is marked, with why


class QuotaSpentAfterOneSession(PublishingFakeBackend):
    """A Kaggle account with 15 s of quota: one session; then it is spent until the refresh. As on
    Kaggle, a checkpoint stays on the account: the store keeps a stub (its manifest and where
    it lies), and `fetch_checkpoint` brings the files here."""

    refresh_at = datetime(2026, 11, 5, 9, 0, tzinfo=UTC)

    def quota(self) -> Quota | None:
        super().quota()
        seconds_left = 0.0 if self.launches() else 15.0
        return Quota(seconds_left=seconds_left, refresh_at=self.refresh_at)


def test_a_job_whose_quota_runs_out_continues_locally_from_its_checkpoint(
    db: Database, tmp_path: Path
) -> None:
    """Changing backend: a Kaggle job that asks for it, where the operator allows it, goes on
    from its newest verified checkpoint on the local backend once its quota is spent, and ends
    on the uninterrupted digest. Its Kaggle session was sized to the quota left."""
    clock = ManualClock()
    kaggle = QuotaSpentAfterOneSession(tmp_path / "kaggle", poll_seconds=1, clock=clock.seconds)
    engine, local, job_id = _kaggle_then_local(db, tmp_path, kaggle, clock)
    tick(engine, clock, 30)

    job, segments = job_and_segments(db, job_id)
    assert job.state == "succeeded", job.reason
    assert job.backend == "local"
    assert [(s.start_step, s.end_step) for s in segments] == [(0, 10), (10, 20), (20, 30)]
    # 15 s of quota for the 20 s sessions the spec asks for; none on this machine.
    assert [s.limit_seconds for s in segments] == [15, 20, 20]
    assert kaggle.launches() == [segments[0].launch_id]
    assert local.launches() == [s.launch_id for s in segments[1:]]
    # The checkpoint on Kaggle was fetched here before the move, once.
    assert [name for name, _ in kaggle.calls].count("fetch_checkpoint") == 1
    with db.transaction() as session:
        kinds = session.scalars(
            select(Event.kind).where(Event.job_id == job_id).order_by(Event.id)
        ).all()
        [moved] = session.scalars(
            select(Event.message).where(Event.job_id == job_id, Event.kind == "moved")
        ).all()
    assert kinds.index("checkpoint_fetched") < kinds.index("moved")
    assert moved == (
        "moved from kaggle to local: its Kaggle quota is spent until 2026-11-05 09:00 UTC "
        "(0 s left) and kaggle.on_quota_exhausted is local; continues from step 10"
    )
    assert final_digest(db, job_id) == uninterrupted_digest(30)


class KeepsRequests(FakeBackend):
    """Keeps every launch request it is handed."""

    requests: list[LaunchRequest]

    def launch(self, request: LaunchRequest) -> str:
        self.requests.append(request)
        return super().launch(request)


def test_a_launch_hands_the_backend_the_stored_checkpoint_it_expects_and_a_first_one_none(
    db: Database, tmp_path: Path
) -> None:
    """What a backend copies into the session: nothing for the first segment (a local session
    handed a path would look for a checkpoint there), then the store's copy of exactly the
    checkpoint the segment's spec expects."""
    clock = ManualClock()
    backend = KeepsRequests(tmp_path / "fake", poll_seconds=1, clock=clock.seconds)
    backend.requests = []
    engine = _engine(db, backend, tmp_path, clock)
    (job_id,) = submit_jobs(engine, 1, total_steps=20)
    tick(engine, clock, 20)

    assert job_and_segments(db, job_id)[0].state == "succeeded"
    first, second = backend.requests
    assert (first.resume_from, first.spec.expect) == (None, None)
    assert second.spec.expect == CheckpointRef(job_id, 0, 10)
    assert second.resume_from == engine.store.path(job_id, 0)


def _told(db: Database, job_id: str, *kinds: str) -> list[tuple[str, int | None, str | None]]:
    """The job's events of `kinds` as its owner reads them (the job page, `baton show`)."""
    with db.transaction() as session:
        owner = get_or_create_user(session, ADMIN_USER).id
        events = queries.list_events(session, owner, job_id)
    return [(e.kind, e.segment_index, e.message) for e in events if e.kind in kinds]


def test_the_job_s_events_say_what_each_launch_planned_and_why_one_was_refused(
    db: Database, tmp_path: Path
) -> None:
    """Retries, as the user reads them: each planned segment names the step it starts from, and a
    refused launch names the backend's reason on the segment; the retry starts from the same
    step."""
    clock = ManualClock()
    backend = RefusesSegmentOneOnce(tmp_path / "fake", poll_seconds=1, clock=clock.seconds)
    engine = _engine(db, backend, tmp_path, clock)
    (job_id,) = submit_jobs(engine, 1, total_steps=30, retry={"max_failures": 1})
    tick(engine, clock, 40)

    assert job_and_segments(db, job_id)[0].state == "succeeded"
    assert _told(db, job_id, "segment_planned", "segment_failed") == [
        ("segment_planned", None, "segment 0 from step 0"),
        ("segment_planned", None, "segment 1 from step 10"),
        ("segment_failed", 1, "launch refused: machine shape NvidiaTeslaP100 is not offered"),
        # The job's own event: the failure it counts before the retry.
        ("segment_failed", None, "launch refused: machine shape NvidiaTeslaP100 is not offered"),
        ("segment_planned", None, "segment 2 from step 10"),
        ("segment_planned", None, "segment 3 from step 20"),
    ]


def _kaggle_then_local(
    db: Database, tmp_path: Path, kaggle: FakeBackend, clock: ManualClock
) -> tuple[Engine, FakeBackend, str]:
    """A Kaggle job that asks to continue locally once its quota is spent, where the operator
    allows it; the engine and the local backend, and the job's id."""
    local = FakeBackend(tmp_path / "local", poll_seconds=1, clock=clock.seconds)
    engine = Engine(
        db,
        StaticBackends({"kaggle": kaggle, "local": local}),
        tmp_path / "checkpoints",
        clock=clock,
        allow_local_fallback=True,
    )
    with db.transaction() as session:
        owner = get_or_create_user(session, ADMIN_USER).id
    spec = kaggle_spec({"on_quota_exhausted": "local"}, total_steps=30)
    return engine, local, engine.submit(owner, JobSpec.model_validate(spec)).id


class RefreshUnknown(QuotaSpentAfterOneSession):
    """Kaggle says how little quota is left but not when it comes back."""

    refresh_at = None  # type: ignore[assignment]


def test_a_job_moved_where_no_refresh_time_is_known_says_so_and_goes_on(
    db: Database, tmp_path: Path
) -> None:
    """Changing backend, as the user reads it: the move names what is left of the quota and the
    step the job continues from, and no refresh time when Kaggle gives none."""
    clock = ManualClock()
    kaggle = RefreshUnknown(tmp_path / "kaggle", poll_seconds=1, clock=clock.seconds)
    engine, local, job_id = _kaggle_then_local(db, tmp_path, kaggle, clock)
    tick(engine, clock, 30)

    job, segments = job_and_segments(db, job_id)
    assert (job.state, job.backend) == ("succeeded", "local"), job.reason
    assert local.launches() == [s.launch_id for s in segments[1:]]
    assert _told(db, job_id, "moved") == [
        (
            "moved",
            None,
            "moved from kaggle to local: its Kaggle quota is spent (0 s left) and "
            "kaggle.on_quota_exhausted is local; continues from step 10",
        )
    ]
    assert final_digest(db, job_id) == uninterrupted_digest(30)


class FetchRots(QuotaSpentAfterOneSession):
    """The checkpoint left on Kaggle comes back damaged, however often it is fetched: the
    backend's verification of the copy refuses it, as Kaggle's does."""

    def fetch_checkpoint(self, stored: Path, expect: CheckpointRef) -> int:
        self._enter("fetch_checkpoint")
        raise CorruptCheckpoint(f"{STATE_FILE}: sha256 mismatch")


def test_a_job_whose_checkpoint_on_kaggle_cannot_be_fetched_intact_fails_never_moved_from_scratch(
    db: Database, tmp_path: Path
) -> None:
    """Changing backend: a copy that fails verification is never used, and the job is not started
    again from step 0 on the local backend either: it fails, saying why."""
    clock = ManualClock()
    kaggle = FetchRots(tmp_path / "kaggle", poll_seconds=1, clock=clock.seconds)
    engine, local, job_id = _kaggle_then_local(db, tmp_path, kaggle, clock)
    tick(engine, clock, 30)

    job, segments = job_and_segments(db, job_id)
    reason = "cannot resume: 1 checkpoint(s) could not be fetched intact"
    assert (job.state, job.backend, job.reason) == ("failed", "kaggle", reason)
    assert _told(db, job_id, "failed") == [("failed", None, reason)]
    assert [s.state for s in segments] == ["succeeded"]
    assert local.launches() == []


class CancelledDuringTheFetch(QuotaSpentAfterOneSession):
    """The user cancels the job while its checkpoint is on its way from Kaggle."""

    engine: Engine

    def fetch_checkpoint(self, stored: Path, expect: CheckpointRef) -> int:
        fetched = super().fetch_checkpoint(stored, expect)
        job, _ = job_and_segments(self.engine.db, expect.job_id)
        self.engine.act(job.user_id, job.id, UserAction.CANCEL)
        return fetched


def test_a_job_cancelled_while_its_checkpoint_is_fetched_stays_cancelled_where_it_was(
    db: Database, tmp_path: Path
) -> None:
    """Compare-and-set: the move read the job as queued before the fetch; the cancel that came in
    meanwhile wins, and the cancelled job is neither moved nor launched anywhere."""
    clock = ManualClock()
    kaggle = CancelledDuringTheFetch(tmp_path / "kaggle", poll_seconds=1, clock=clock.seconds)
    engine, local, job_id = _kaggle_then_local(db, tmp_path, kaggle, clock)
    kaggle.engine = engine
    tick(engine, clock, 30)

    job, segments = job_and_segments(db, job_id)
    assert (job.state, job.backend) == ("cancelled", "kaggle")
    assert _told(db, job_id, "moved") == []
    assert [s.state for s in segments] == ["succeeded"]
    assert local.launches() == []


class QuotaOf(FakeBackend):
    """A Kaggle account with `seconds_left` of quota, whatever runs; the refresh a week away."""

    name = "kaggle"
    seconds_left = 0.0

    def quota(self) -> Quota | None:
        super().quota()
        return Quota(self.seconds_left, datetime(2026, 11, 9, 9, 0, tzinfo=UTC))


@pytest.mark.parametrize(
    ("seconds_left", "launched"), [(MIN_SESSION_SECONDS, True), (MIN_SESSION_SECONDS - 0.5, False)]
)
def test_a_quota_of_the_shortest_session_worth_launching_launches_one_and_less_waits(
    db: Database, tmp_path: Path, seconds_left: float, launched: bool
) -> None:
    """Quota waiting at its edge: a quota left of exactly the shortest session worth launching
    is spent on a session that long; any less, and the job waits for the refresh."""
    clock = ManualClock()
    kaggle = QuotaOf(tmp_path / "kaggle", poll_seconds=1, clock=clock.seconds)
    kaggle.seconds_left = seconds_left
    engine = Engine(db, StaticBackends({"kaggle": kaggle}), tmp_path / "checkpoints", clock=clock)
    with db.transaction() as session:
        owner = get_or_create_user(session, ADMIN_USER).id
    job_id = engine.submit(owner, JobSpec.model_validate(kaggle_spec(total_steps=30))).id
    tick(engine, clock, 1)

    job, segments = job_and_segments(db, job_id)
    if launched:
        assert job.state == "running"
        assert [s.limit_seconds for s in segments] == [MIN_SESSION_SECONDS]
    else:
        assert (job.state, segments) == ("waiting", [])
