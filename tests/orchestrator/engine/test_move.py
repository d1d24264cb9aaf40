"""Moving a paused job to another backend (engine/move.py, `baton move`), on two fake backends and
a manual clock: its spec is rewritten for the new one, it continues there from its newest
checkpoint, and a spec the other backend refuses leaves the job as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import select, update

from orchestrator.backends.registry import StaticBackends
from orchestrator.db import Database
from orchestrator.engine import Engine
from orchestrator.engine.move import moved_spec
from orchestrator.lifecycle import ActionConflict, UserAction
from orchestrator.models import Checkpoint, Event, Job
from orchestrator.spec import JobSpec
from tests.factories import job_spec
from tests.support.clock import ManualClock
from tests.support.engine_runs import job_and_segments, submit_jobs, tick
from tests.support.fake_backend import FakeBackend, uninterrupted_digest

T4 = {"accelerator": "t4x2", "quota_reserve_seconds": 0}
P100 = {"accelerator": "p100", "quota_reserve_seconds": 0}


class FakeKaggle(FakeBackend):
    name = "kaggle"


@pytest.fixture
def db(sqlite_db: Database) -> Database:
    return sqlite_db


def _chain_one_segment_then_pause(engine: Engine, clock: ManualClock, job_id: str) -> None:
    job, _ = job_and_segments(engine.db, job_id)
    if job.state == "paused":
        engine.act(job.user_id, job_id, UserAction.RESUME)
    tick(engine, clock, 1)  # the next segment launched
    engine.act(job.user_id, job_id, UserAction.PAUSE)
    tick(engine, clock, 2)  # its session collected, the job paused


def _moved_events(db: Database, job_id: str) -> list[str | None]:
    with db.transaction() as session:
        query = select(Event.message).where(Event.job_id == job_id, Event.kind == "moved")
        return list(session.scalars(query.order_by(Event.id)))


def test_a_job_moved_kaggle_local_kaggle_continues_each_time_and_ends_on_the_digest(
    db: Database, tmp_path: Path
) -> None:
    clock = ManualClock()
    kaggle = FakeKaggle(tmp_path / "kaggle", poll_seconds=1, clock=clock.seconds)
    local = FakeBackend(tmp_path / "local", poll_seconds=1, clock=clock.seconds)
    backends = StaticBackends({"kaggle": kaggle, "local": local})
    engine = Engine(db, backends, tmp_path / "checkpoints", clock=clock)
    (job_id,) = submit_jobs(engine, 1, total_steps=30, backend="kaggle", kaggle=T4)
    _chain_one_segment_then_pause(engine, clock, job_id)

    job, _ = job_and_segments(db, job_id)
    moved = engine.move(job.user_id, job_id, "local", None)
    assert (moved.state, moved.backend, moved.slot_key) == ("paused", "local", None)
    assert moved.spec["backend"] == "local"
    assert moved.spec.get("kaggle") is None
    _chain_one_segment_then_pause(engine, clock, job_id)

    moved = engine.move(job.user_id, job_id, "kaggle", P100)
    assert (moved.backend, moved.spec["backend"]) == ("kaggle", "kaggle")
    assert moved.spec["kaggle"]["accelerator"] == "p100"
    engine.act(job.user_id, job_id, UserAction.RESUME)
    tick(engine, clock, 10)

    job, segments = job_and_segments(db, job_id)
    assert job.state == "succeeded", job.reason
    assert [(s.start_step, s.end_step) for s in segments] == [(0, 10), (10, 20), (20, 30)]
    assert (len(kaggle.launches()), len(local.launches())) == (2, 1)
    assert _moved_events(db, job_id) == [
        "moved from kaggle to local; continues from step 10",
        "moved from local to kaggle; continues from step 20",
    ]
    with db.transaction() as session:
        final = session.scalars(select(Checkpoint).where(Checkpoint.step == 30)).one()
    assert final.model_digest == uninterrupted_digest(30)


def _spec(**overrides: Any) -> dict[str, Any]:
    return JobSpec.model_validate(job_spec(**overrides)).model_dump(mode="json")


def test_kaggle_options_are_dropped_on_leaving_and_given_or_kept_on_going_there() -> None:
    on_kaggle = _spec(backend="kaggle", kaggle=T4)
    local = moved_spec(on_kaggle, "local", None)
    assert (local["backend"], local.get("kaggle")) == ("local", None)
    assert {k: v for k, v in local.items() if k not in ("backend", "kaggle")} == {
        k: v for k, v in on_kaggle.items() if k not in ("backend", "kaggle")
    }
    assert moved_spec(on_kaggle, "kaggle", None)["kaggle"] == on_kaggle["kaggle"]
    assert moved_spec(on_kaggle, "kaggle", P100)["kaggle"]["accelerator"] == "p100"
    assert moved_spec(local, "kaggle", P100)["kaggle"]["accelerator"] == "p100"
    # The result is the stored form: what JobSpec reads back unchanged.
    assert moved_spec(local, "kaggle", P100) == _spec(backend="kaggle", kaggle=P100)


def test_a_spec_the_other_backend_refuses_leaves_the_job_where_it_was(
    db: Database, tmp_path: Path
) -> None:
    clock = ManualClock()
    local = FakeBackend(tmp_path / "local", poll_seconds=1, clock=clock.seconds)
    engine = Engine(db, StaticBackends({"local": local}), tmp_path / "checkpoints", clock=clock)
    # A 13 h session: longer than Kaggle runs any.
    (job_id,) = submit_jobs(engine, 1, total_steps=30, session={"limit_seconds": 13 * 3600})
    _chain_one_segment_then_pause(engine, clock, job_id)
    job, _ = job_and_segments(db, job_id)
    with pytest.raises(ValidationError, match="Kaggle ends"):
        engine.move(job.user_id, job_id, "kaggle", T4)
    job, _ = job_and_segments(db, job_id)
    assert (job.state, job.backend, job.spec["backend"]) == ("paused", "local", "local")
    assert _moved_events(db, job_id) == []


def test_a_job_moved_to_another_accelerator_on_its_backend_continues_and_says_from_where(
    db: Database, tmp_path: Path
) -> None:
    clock = ManualClock()
    kaggle = FakeKaggle(tmp_path / "kaggle", poll_seconds=1, clock=clock.seconds)
    engine = Engine(db, StaticBackends({"kaggle": kaggle}), tmp_path / "checkpoints", clock=clock)
    (job_id,) = submit_jobs(engine, 1, total_steps=20, backend="kaggle", kaggle=T4)
    _chain_one_segment_then_pause(engine, clock, job_id)

    job, _ = job_and_segments(db, job_id)
    moved = engine.move(job.user_id, job_id, "kaggle", P100)
    assert moved.spec["kaggle"]["accelerator"] == "p100"
    assert _moved_events(db, job_id) == ["moved from kaggle to kaggle; continues from step 10"]
    engine.act(job.user_id, job_id, UserAction.RESUME)
    tick(engine, clock, 10)
    job, segments = job_and_segments(db, job_id)
    assert job.state == "succeeded", job.reason
    assert [(s.start_step, s.end_step) for s in segments] == [(0, 10), (10, 20)]


def test_only_a_paused_job_with_no_live_session_is_moved(db: Database, tmp_path: Path) -> None:
    clock = ManualClock()
    kaggle = FakeKaggle(tmp_path / "kaggle", poll_seconds=1, clock=clock.seconds)
    local = FakeBackend(tmp_path / "local", poll_seconds=1, clock=clock.seconds)
    backends = StaticBackends({"kaggle": kaggle, "local": local})
    engine = Engine(db, backends, tmp_path / "checkpoints", clock=clock)
    (job_id,) = submit_jobs(engine, 1, total_steps=30, backend="kaggle", kaggle=T4)
    user_id = job_and_segments(db, job_id)[0].user_id
    with pytest.raises(ActionConflict, match="job is queued; pause it"):
        engine.move(user_id, job_id, "local", None)
    tick(engine, clock, 1)  # its first session runs on Kaggle
    # Paused while that session still runs (the state the move must wait out): moved now, the
    # job would train on two backends at once.
    with db.transaction() as session:
        session.execute(update(Job).where(Job.id == job_id).values(state="paused"))
    with pytest.raises(ActionConflict, match="let its session end"):
        engine.move(user_id, job_id, "local", None)
    job, segments = job_and_segments(db, job_id)
    assert (job.backend, segments[-1].state) == ("kaggle", "running")
