"""Waiting jobs with nothing to do are put off in one statement per batch (engine/idle.py): to
exactly where a visit would have left them, and never a job that a visit would have acted on or
that another owner holds."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from orchestrator.auth import ADMIN_USER, get_or_create_user
from orchestrator.backends.local.backend import LocalBackend
from orchestrator.backends.registry import StaticBackends
from orchestrator.db import Database
from orchestrator.engine import Engine
from orchestrator.lifecycle import JobState, SegmentState
from orchestrator.migrate import upgrade
from orchestrator.models import Event, Job, KaggleCredential, Segment
from orchestrator.spec import JobSpec
from tests.factories import job_spec

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


@pytest.fixture
def engine(database_url: str, tmp_path: Path) -> Iterator[Engine]:
    upgrade(database_url)
    db = Database(database_url)
    backends = StaticBackends({"local": LocalBackend(tmp_path / "sessions", grace_seconds=1)})
    yield Engine(db, backends, tmp_path / "checkpoints", clock=lambda: NOW)
    db.dispose()


def _waiting(engine: Engine, user: str = ADMIN_USER, **values: Any) -> str:
    with engine.db.transaction() as session:
        owner = get_or_create_user(session, user).id
    job_id = engine.submit(owner, JobSpec.model_validate(job_spec())).id
    fields = {"state": JobState.WAITING.value, "wait_until": NOW + timedelta(hours=5)} | values
    with engine.db.transaction() as session:
        session.execute(update(Job).where(Job.id == job_id).values(**fields))
    return job_id


def _row(engine: Engine, job_id: str) -> tuple[Any, ...]:
    with engine.db.transaction() as session:
        job = session.get(Job, job_id)
        assert job is not None
        events = session.scalars(select(Event.kind).where(Event.job_id == job_id)).all()
        return (
            job.state,
            job.next_attempt_at,
            job.claim_owner,
            job.transient_errors,
            job.wait_until,
            list(events),
        )


def test_a_parked_job_is_left_as_a_visit_leaves_it(engine: Engine) -> None:
    parked, visited = _waiting(engine, transient_errors=2), _waiting(engine, transient_errors=2)
    assert engine.park_waiting([parked]) == [parked]
    engine.reconcile_job(visited)
    assert _row(engine, parked) == _row(engine, visited)
    assert _row(engine, parked)[1] is not None  # next look: the quota refresh


def _segment(engine: Engine, job_id: str, state: SegmentState) -> None:
    with engine.db.transaction() as session:
        session.add(
            Segment(
                job_id=job_id,
                index=0,
                state=state.value,
                launch_id=f"{job_id}-0000",
                start_step=0,
                limit_seconds=60,
                launch_spec={},
            )
        )


def test_only_jobs_with_nothing_to_do_and_no_holder_are_parked(engine: Engine) -> None:
    idle = _waiting(engine)
    lapsed_claim = _waiting(engine, claim_owner="gone", claim_expires_at=NOW - timedelta(1))
    # The usual waiting job: its earlier segments ended.
    ended_segments = _waiting(engine)
    _segment(engine, ended_segments, SegmentState.SUCCEEDED)
    with engine.db.transaction() as session:
        admin = get_or_create_user(session, ADMIN_USER).id
        session.add(KaggleCredential(user_id=admin, username="admin", key_ciphertext="sealed"))
    kaggle_with_credentials = _waiting(engine, backend="kaggle")
    others = {
        "refresh passed": _waiting(engine, wait_until=NOW - timedelta(seconds=1)),
        "refresh now": _waiting(engine, wait_until=NOW, transient_errors=1),
        "held": _waiting(engine, claim_owner="other", claim_expires_at=NOW + timedelta(1)),
        "held until now": _waiting(engine, claim_owner="other", claim_expires_at=NOW),
        "queued": _waiting(engine, state=JobState.QUEUED.value),
        # Another user's credentials are no use to this one's job.
        "kaggle without credentials": _waiting(engine, "bob", backend="kaggle"),
        "live segment": _waiting(engine),
    }
    _segment(engine, others["live segment"], SegmentState.RUNNING)
    before = {why: _row(engine, job_id) for why, job_id in others.items()}
    expected = [idle, lapsed_claim, ended_segments, kaggle_with_credentials]
    parked = engine.park_waiting([*expected, *others.values()])
    assert sorted(parked) == sorted(expected)
    assert {why: _row(engine, job_id) for why, job_id in others.items()} == before
