"""Engine-level guarantees, through the Engine's public methods only (submit, reconcile_job):
a session too short to make progress cannot chain forever, and the next segment is planned with
the save and upload times that earlier segments measured."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from orchestrator.auth import ADMIN_USER, get_or_create_user
from orchestrator.backends.local.backend import LocalBackend
from orchestrator.backends.registry import StaticBackends
from orchestrator.config import Settings
from orchestrator.db import Database
from orchestrator.engine import Engine, JobNotFound
from orchestrator.lifecycle import JobState, UserAction
from orchestrator.models import Checkpoint, Job, Segment
from orchestrator.spec import JobSpec
from tests.factories import job_spec, stop_sessions
from worker.boundary.manifest import write_manifest


@pytest.fixture
def engine(store: Database, settings: Settings) -> Iterator[Engine]:
    backend = LocalBackend(settings.sessions_dir, grace_seconds=1)
    yield Engine(store, StaticBackends({"local": backend}), settings.checkpoints_dir)
    stop_sessions(settings.sessions_dir)


def _submit(engine: Engine, **overrides: object) -> str:
    with engine.db.transaction() as session:
        owner = get_or_create_user(session, ADMIN_USER).id
    return engine.submit(owner, JobSpec.model_validate(job_spec(**overrides))).id


def _segments(db: Database, job_id: str) -> list[Segment]:
    with db.transaction() as session:
        query = select(Segment).where(Segment.job_id == job_id).order_by(Segment.index)
        return list(session.scalars(query))


def _job(db: Database, job_id: str) -> Job:
    with db.transaction() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job


def test_a_session_too_short_for_one_step_fails_the_job_instead_of_chaining(
    engine: Engine,
) -> None:
    # The safety margin alone fills the session: the worker takes no step, commits the state it
    # started from, and exits cleanly, long before the session's limit.
    job_id = _submit(
        engine,
        session={"limit_seconds": 60, "margin": {"k_steps": 1.0, "safety_seconds": 60}},
        retry={"max_failures": 0},
    )
    bound = time.monotonic() + 120
    engine.reconcile_job(job_id)
    while _segments(engine.db, job_id)[0].state in ("launching", "running"):
        assert time.monotonic() < bound, "the first segment never ended"
        time.sleep(0.1)
        engine.reconcile_job(job_id)
    [segment] = _segments(engine.db, job_id)
    assert (segment.state, segment.outcome) == ("succeeded", "deadline")
    assert segment.start_step == segment.end_step == 0
    job = _job(engine.db, job_id)
    assert job.state == JobState.FAILED
    assert "committed no new step" in (job.reason or "")


def test_the_next_segment_keeps_the_save_and_upload_time_earlier_segments_measured(
    engine: Engine, tmp_path: Path
) -> None:
    job_id = _submit(engine, total_steps=100)
    # Segment 0 committed step 40 and measured a 7 s save and a 3 s upload.
    stored = engine.store.path(job_id, 0)
    stored.mkdir(parents=True)
    (stored / "state.bin").write_bytes(b"state")
    manifest = write_manifest(
        stored, job_id=job_id, segment_index=0, step=40, model_digest="0" * 64
    )
    with engine.db.transaction() as session:
        session.add(
            Segment(
                job_id=job_id,
                index=0,
                state="succeeded",
                launch_id=f"{job_id}-0000",
                handle=f"{job_id}-0000",
                start_step=0,
                end_step=40,
                outcome="deadline",
                limit_seconds=60,
                launch_spec={},
                timings={
                    "startup": 2.0,
                    "load": 1.0,
                    "train": 40.0,
                    "save": 7.0,
                    "upload": 3.0,
                    "total": 53.0,
                    "session": 54.0,
                    "step_ema": 1.0,
                },
            )
        )
        session.add(
            Checkpoint(
                job_id=job_id,
                segment_index=0,
                step=40,
                location=str(stored),
                model_digest=manifest.model_digest,
                bytes=manifest.total_bytes,
                manifest=manifest.to_dict(),
            )
        )
    # The plan is recorded with the launch intent before the backend is called, and that plan
    # is what is checked (the session itself fails: the stand-in checkpoint holds no state).
    engine.reconcile_job(job_id)
    segments = _segments(engine.db, job_id)
    assert len(segments) == 2
    planned = segments[1].launch_spec
    assert planned["expect"] == {"job_id": job_id, "segment_index": 0, "step": 40}
    estimates = planned["estimates"]
    assert estimates["save_seconds"] >= 7.0
    assert estimates["upload_seconds"] >= 3.0
    assert estimates["exit_seconds"] >= 1.0
    assert estimates["step_seconds"] == 1.0


def test_a_user_cannot_act_on_another_users_job(engine: Engine) -> None:
    job_id = _submit(engine)
    with engine.db.transaction() as session:
        bob = get_or_create_user(session, "bob").id
    for action in UserAction:
        with pytest.raises(JobNotFound):
            engine.act(bob, job_id, action)
    assert _job(engine.db, job_id).state == JobState.QUEUED
