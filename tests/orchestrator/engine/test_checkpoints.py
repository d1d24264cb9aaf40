"""Checkpoint retention: pruning a job drops only that job's older and rejected checkpoint files,
keeps the newest `keep` good ones and every row, and never touches another job's checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from orchestrator import queries
from orchestrator.db import Database
from orchestrator.engine.checkpoints import CheckpointStore
from orchestrator.models import Checkpoint, Job
from tests.support.engine_runs import (
    fake_engine,
    job_and_segments,
    reconcile_until_finished,
    submit_jobs,
)
from tests.support.fake_backend import FakeBackend
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
    assert "trainer.pt" in rejected[(mine, 2)]
    assert rejected[(other, 2)] == "damaged in storage"
    assert [rejected[(mine, i)] for i in (0, 1)] == [None, None]
    assert [rejected[(other, i)] for i in (0, 1)] == [None, None]
    assert store.resume_point(other) == CheckpointRef(other, 1, 50)
