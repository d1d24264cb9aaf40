"""Checkpoint retention: pruning a job drops only that job's older and rejected checkpoint files,
keeps the newest `keep` good ones and every row, and never touches another job's checkpoints.
Checkpoints a Kaggle session published on the account (a stub here): a download or a move fetches
them, every file verified, and a copy that fails is rejected and never resumed from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi import HTTPException
from sqlalchemy import select

from orchestrator import queries
from orchestrator.api.routes.checkpoints import checkpoint_file_response
from orchestrator.backends.registry import StaticBackends
from orchestrator.db import Database
from orchestrator.engine import Engine
from orchestrator.engine.checkpoints import CheckpointStore
from orchestrator.lifecycle import ActionConflict, UserAction
from orchestrator.models import Checkpoint, Event, Job
from tests.support.clock import ManualClock
from tests.support.engine_runs import (
    fake_engine,
    final_digest,
    job_and_segments,
    reconcile_until_finished,
    submit_jobs,
    tick,
)
from tests.support.fake_backend import (
    STATE_FILE,
    FakeBackend,
    PublishingFakeBackend,
    uninterrupted_digest,
)
from worker.boundary.contract import CheckpointRef
from worker.boundary.manifest import verify_checkpoint, write_manifest


@pytest.fixture
def db(sqlite_db: Database) -> Database:
    return sqlite_db


def _commit(store: CheckpointStore, job_id: str, segment_index: int, step: int) -> None:
    """A committed checkpoint in the store, as collect leaves one: files, manifest, row."""
    directory = store.path(job_id, segment_index)
    directory.mkdir(parents=True)
    (directory / "trainer.pt").write_bytes(f"{job_id} {step}".encode())
    manifest = write_manifest(
        directory, job_id=job_id, segment_index=segment_index, step=step, model_digest="d"
    )
    with store.db.transaction() as session:
        store.record(session, job_id, segment_index, step, manifest)


def _verifies(store: CheckpointStore, job_id: str, segment_index: int) -> bool:
    """Whether the checkpoint's files are still there; raises if they are, but damaged."""
    directory = store.path(job_id, segment_index)
    if not directory.exists():
        return False
    verify_checkpoint(directory)
    return True


def test_pruning_one_job_keeps_its_newest_and_never_touches_another_jobs_checkpoints(
    db: Database, tmp_path: Path
) -> None:
    engine = fake_engine(db, FakeBackend(tmp_path / "fake"), tmp_path / "checkpoints")
    mine, other = submit_jobs(engine, 2, total_steps=100)
    store = CheckpointStore(db, tmp_path / "checkpoints", keep=2)
    # The other job's checkpoints are newer by step than all of mine, and one is rejected.
    for index, step in enumerate([10, 20, 30, 40]):
        _commit(store, mine, index, step)
    for index, step in enumerate([50, 60, 70, 80]):
        _commit(store, other, index, step)
    store.reject(mine, 3, "damaged in storage")
    store.reject(other, 0, "damaged in storage")

    store.prune(mine)

    # Mine: the newest two good ones (steps 30 and 20) keep their files; the older one and the
    # rejected one lose theirs; every row stays.
    assert [_verifies(store, mine, index) for index in range(4)] == [False, True, True, False]
    # The other job's, newer and rejected ones included, are all still there, byte for byte.
    assert [_verifies(store, other, index) for index in range(4)] == [True] * 4
    with db.transaction() as session:
        rows = session.scalars(select(Checkpoint.job_id)).all()
    assert sorted(rows) == sorted([mine] * 4 + [other] * 4)

    store.prune(other)
    assert [_verifies(store, other, index) for index in range(4)] == [False, False, True, True]
    assert [_verifies(store, mine, index) for index in range(4)] == [False, True, True, False]


@pytest.mark.parametrize("keep_when_done", [1, 2])
def test_a_finished_job_keeps_only_its_final_checkpoints_and_the_listing_says_which(
    db: Database, tmp_path: Path, keep_when_done: int
) -> None:
    # 5 sessions of 10 steps; while it runs the store keeps 3, once it succeeds `keep_when_done`.
    engine = fake_engine(
        db, FakeBackend(tmp_path / "fake"), tmp_path / "checkpoints", keep_checkpoints=3
    )
    [job_id] = submit_jobs(engine, 1, total_steps=50, keep_when_done=keep_when_done)
    reconcile_until_finished(engine, 60)
    job, segments = job_and_segments(db, job_id)
    assert job.state == "succeeded"
    assert len(segments) == 5
    kept = [_verifies(engine.store, job_id, seg.index) for seg in segments]
    assert kept == [False] * (5 - keep_when_done) + [True] * keep_when_done
    with db.transaction() as session:
        user_id = session.scalars(select(Job.user_id)).one()
        listed = queries.list_checkpoints(session, user_id, job_id, include_pruned=True)
        default = queries.list_checkpoints(session, user_id, job_id)
    assert [(row.step, row.kept) for row in listed] == [
        (step, step > 50 - 10 * keep_when_done) for step in (10, 20, 30, 40, 50)
    ]
    assert [row.step for row in default] == [row.step for row in listed if row.kept]


def test_a_job_resumes_from_its_own_newest_checkpoint_that_verifies_never_another_jobs(
    db: Database, tmp_path: Path
) -> None:
    """Verified handoff: the newest of the job's own checkpoints whose files verify against
    their manifest and the job, segment and step the row names is resumed from; a damaged one is
    marked rejected with the reason, and another job's checkpoints, newer ones included, are
    neither resumed from nor rejected."""
    engine = fake_engine(db, FakeBackend(tmp_path / "fake"), tmp_path / "checkpoints")
    mine, other = submit_jobs(engine, 2, total_steps=100)
    store = CheckpointStore(db, tmp_path / "checkpoints", keep=5)
    for index, step in enumerate([10, 20, 30]):
        _commit(store, mine, index, step)
    for index, step in enumerate([40, 50, 60]):
        _commit(store, other, index, step)
    # The other job's segment 2 was rejected before; its files are still there.
    store.reject(other, 2, "damaged in storage")
    with (store.path(mine, 2) / "trainer.pt").open("ab") as file:
        file.write(b"!")  # mine's newest is damaged after its commit

    assert store.resume_point(mine) == CheckpointRef(mine, 1, 20)
    # A checkpoint verifies only as the job, segment and step it was committed as.
    assert store.verify(mine, 1, 20) is None
    assert store.verify(mine, 1, 25) is not None
    with db.transaction() as session:
        rejected = {
            (row.job_id, row.segment_index): row.rejected
            for row in session.scalars(select(Checkpoint))
        }
    assert rejected[(mine, 2)] is not None
    assert "trainer.pt" in str(rejected[(mine, 2)])
    assert rejected[(other, 2)] == "damaged in storage"
    assert [rejected[(mine, i)] for i in (0, 1)] == [None, None]
    assert [rejected[(other, i)] for i in (0, 1)] == [None, None]
    assert store.resume_point(other) == CheckpointRef(other, 1, 50)


T4 = {"accelerator": "t4x2", "quota_reserve_seconds": 0}


@dataclass
class KaggleJob:
    engine: Engine
    kaggle: PublishingFakeBackend
    clock: ManualClock
    user_id: str
    job_id: str

    def damage(self, segment_index: int) -> None:
        """Damage the copy a session published on the account."""
        with (self.kaggle.published(self.job_id, segment_index) / STATE_FILE).open("ab") as file:
            file.write(b"!")


def _on_kaggle(db: Database, tmp_path: Path, sessions: int) -> KaggleJob:
    """A Kaggle job of 40 steps paused after `sessions` sessions of 10, each of whose
    checkpoints stayed on the account (a stub here); a local backend beside it."""
    clock = ManualClock()
    kaggle = PublishingFakeBackend(tmp_path / "kaggle", poll_seconds=1, clock=clock.seconds)
    local = FakeBackend(tmp_path / "local", poll_seconds=1, clock=clock.seconds)
    backends = StaticBackends({"kaggle": kaggle, "local": local})
    engine = Engine(db, backends, tmp_path / "checkpoints", clock=clock, keep_checkpoints=3)
    (job_id,) = submit_jobs(engine, 1, total_steps=40, backend="kaggle", kaggle=T4)
    job, _ = job_and_segments(db, job_id)
    for _ in range(4 * sessions):
        if len(job_and_segments(db, job_id)[1]) >= sessions:
            break
        tick(engine, clock, 1)
    engine.act(job.user_id, job_id, UserAction.PAUSE)
    tick(engine, clock, 3)
    job, segments = job_and_segments(db, job_id)
    assert job.state == "paused", job.reason
    assert [s.end_step for s in segments] == [10 * (i + 1) for i in range(sessions)]
    return KaggleJob(engine, kaggle, clock, job.user_id, job_id)


def _download(engine: Engine, user_id: str, job_id: str, step: int) -> bytes:
    response = checkpoint_file_response(engine, user_id, job_id, step, STATE_FILE, None)
    with response.file:
        return response.file.read()


def _events(db: Database, job_id: str, kind: str) -> list[tuple[int | None, str | None]]:
    """The job's events of `kind`, as `baton events` shows them: segment and message."""
    with db.transaction() as session:
        query = select(Event).where(Event.job_id == job_id, Event.kind == kind).order_by(Event.id)
        return [(event.segment_index, event.message) for event in session.scalars(query)]


def _listed(db: Database, user_id: str, job_id: str) -> list[tuple[int, bool, bool]]:
    """What `baton checkpoints --all` shows: step, kept, on Kaggle."""
    with db.transaction() as session:
        rows = queries.list_checkpoints(session, user_id, job_id, include_pruned=True)
    return [(row.step, row.kept, row.on_kaggle) for row in rows]


def _rejected(db: Database, job_id: str) -> dict[int, str | None]:
    with db.transaction() as session:
        rows = session.scalars(select(Checkpoint).where(Checkpoint.job_id == job_id))
        return {row.step: row.rejected for row in rows}


def test_a_download_fetches_a_checkpoint_left_on_kaggle_once_every_file_verified(
    db: Database, tmp_path: Path
) -> None:
    """Retention and changing backend: a checkpoint whose files stayed on Kaggle is listed as
    kept there; its first download fetches it here, every file verified, says so in one event,
    and serves its bytes; a second download serves the copy here without fetching again."""
    run = _on_kaggle(db, tmp_path, 2)
    engine, kaggle, user_id, job_id = run.engine, run.kaggle, run.user_id, run.job_id
    assert _listed(db, user_id, job_id) == [(10, True, True), (20, True, True)]

    body = _download(engine, user_id, job_id, 20)
    published = kaggle.published(job_id, 1)
    assert body == (published / STATE_FILE).read_bytes()
    assert _verifies(engine.store, job_id, 1)
    assert _listed(db, user_id, job_id) == [(10, True, True), (20, True, False)]
    size = sum(path.stat().st_size for path in published.iterdir())
    assert _events(db, job_id, "checkpoint_fetched") == [
        (
            1,
            f"fetched the checkpoint at step 20 to this machine, every file verified "
            f"({size / 1e6:.1f} MB through the orchestrator's link)",
        )
    ]

    assert _download(engine, user_id, job_id, 20) == body
    assert kaggle.fetches == 1
    assert len(_events(db, job_id, "checkpoint_fetched")) == 1
    assert _rejected(db, job_id) == {10: None, 20: None}


def test_a_download_fetches_its_own_job_s_checkpoint_whatever_another_job_has_at_that_step(
    db: Database, tmp_path: Path
) -> None:
    """Isolation: another job's checkpoint at the same step (here one rejected as damaged) never
    stands in for this job's: the download fetches and serves this job's own."""
    other = _on_kaggle(db, tmp_path / "other", 2)
    other.damage(1)
    with pytest.raises(HTTPException):
        _download(other.engine, other.user_id, other.job_id, 20)
    run = _on_kaggle(db, tmp_path / "mine", 2)
    body = _download(run.engine, run.user_id, run.job_id, 20)
    assert body == (run.kaggle.published(run.job_id, 1) / STATE_FILE).read_bytes()
    assert _rejected(db, run.job_id) == {10: None, 20: None}


def test_a_copy_on_kaggle_that_fails_verification_is_rejected_and_never_resumed_from(
    db: Database, tmp_path: Path
) -> None:
    """Verified handoff: a download of a checkpoint whose copy on Kaggle is damaged is refused
    (410, with why); the checkpoint is marked rejected with the reason and an event, listed as
    no longer kept, and a move resumes from the newest one that verifies instead, ending on the
    uninterrupted digest."""
    run = _on_kaggle(db, tmp_path, 2)
    engine, user_id, job_id = run.engine, run.user_id, run.job_id
    run.damage(1)

    with pytest.raises(HTTPException) as refused:
        _download(engine, user_id, job_id, 20)
    assert refused.value.status_code == 410
    assert isinstance(refused.value.detail, str)
    assert refused.value.detail.startswith("the checkpoint at step 20 is unusable: ")
    problem = refused.value.detail.removeprefix("the checkpoint at step 20 is unusable: ")
    assert STATE_FILE in problem
    assert _rejected(db, job_id) == {10: None, 20: f"its files could not be fetched: {problem}"}
    assert _events(db, job_id, "checkpoint_rejected") == [
        (
            1,
            f"checkpoint at step 20 failed verification (its files could not be fetched: "
            f"{problem}); resuming from the newest older checkpoint that verifies",
        )
    ]
    assert _listed(db, user_id, job_id) == [(10, True, True), (20, False, False)]

    moved = engine.move(user_id, job_id, "local", None)
    assert (moved.backend, moved.state) == ("local", "paused")
    assert _events(db, job_id, "moved")[-1][1] == (
        "moved from kaggle to local; continues from step 10"
    )
    engine.act(user_id, job_id, UserAction.RESUME)
    tick(engine, run.clock, 10)
    job, segments = job_and_segments(db, job_id)
    assert job.state == "succeeded", job.reason
    assert [(s.start_step, s.end_step) for s in segments[2:]] == [(10, 20), (20, 30), (30, 40)]
    assert final_digest(db, job_id) == uninterrupted_digest(40)


def test_a_move_off_kaggle_fetches_the_newest_copy_that_verifies_or_is_refused_saying_why(
    db: Database, tmp_path: Path
) -> None:
    """Changing backend: moving a job off Kaggle fetches its newest checkpoint that can be
    fetched intact (a damaged newer copy is rejected on the way); checkpoints left there are
    then out of the new backend's reach (409, with why). With no copy left that verifies, the
    move is refused and the job stays where it was, never restarted from step 0."""
    run = _on_kaggle(db, tmp_path, 3)
    engine, user_id, job_id = run.engine, run.user_id, run.job_id
    run.damage(2)

    engine.move(user_id, job_id, "local", None)
    assert _events(db, job_id, "moved")[-1][1] == (
        "moved from kaggle to local; continues from step 20"
    )
    assert run.kaggle.fetches == 2
    assert [step for step, problem in _rejected(db, job_id).items() if problem] == [30]
    assert _listed(db, user_id, job_id) == [(10, True, True), (20, True, False), (30, False, False)]
    with pytest.raises(HTTPException) as out_of_reach:
        _download(engine, user_id, job_id, 10)
    assert (out_of_reach.value.status_code, out_of_reach.value.detail) == (
        409,
        "the checkpoint at step 10 lies on Kaggle and cannot be fetched: "
        "the files of step 10 lie where the job's backend cannot fetch them",
    )

    other = _on_kaggle(db, tmp_path / "other", 2)
    other_id = other.job_id
    other.damage(0)
    other.damage(1)
    with pytest.raises(ActionConflict) as refused:
        other.engine.move(user_id, other_id, "local", None)
    assert str(refused.value) == (
        "nothing to continue from on local: 2 checkpoint(s) could not be fetched intact"
    )
    job, _ = job_and_segments(db, other_id)
    assert (job.backend, job.state) == ("kaggle", "paused")
    assert list(_rejected(db, other_id)) == [10, 20]
    assert all(_rejected(db, other_id).values())
    # The first job's checkpoints are untouched by the other job's rejections.
    assert [step for step, problem in _rejected(db, job_id).items() if problem] == [30]
