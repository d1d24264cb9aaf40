"""When a Kaggle job's quota is spent, the engine parks it until the refresh, or, where the spec
says `kaggle.on_quota_exhausted: local` and the operator allows it, moves it to the local backend
and launches it there at once (engine/launch.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from orchestrator.auth import ADMIN_USER, get_or_create_user
from orchestrator.backends.base import Quota
from orchestrator.backends.registry import StaticBackends
from orchestrator.db import Database
from orchestrator.engine import Engine
from orchestrator.lifecycle import JobState
from orchestrator.migrate import upgrade
from orchestrator.models import Event, Job
from orchestrator.spec import JobSpec
from tests.factories import kaggle_spec
from tests.support.fake_backend import FakeBackend

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


class SpentKaggle(FakeBackend):
    """A Kaggle account whose week of GPU quota is spent."""

    name = "kaggle"

    def quota(self) -> Quota | None:
        return Quota(seconds_left=0.0, refresh_at=NOW + timedelta(days=3))


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    upgrade(database_url)
    db = Database(database_url)
    yield db
    db.dispose()


def _visit(
    database: Database, tmp_path: Path, policy: str, allowed: bool
) -> tuple[Job, list[str], FakeBackend, FakeBackend]:
    kaggle, local = SpentKaggle(tmp_path / "kaggle"), FakeBackend(tmp_path / "local")
    engine = Engine(
        database,
        StaticBackends({"kaggle": kaggle, "local": local}),
        tmp_path / "checkpoints",
        clock=lambda: NOW,
        allow_local_fallback=allowed,
    )
    with database.transaction() as session:
        owner = get_or_create_user(session, ADMIN_USER).id
    spec = JobSpec.model_validate(kaggle_spec({"on_quota_exhausted": policy}))
    job_id = engine.submit(owner, spec).id
    engine.reconcile_job(job_id)
    with database.transaction() as session:
        job = session.get(Job, job_id)
        assert job is not None
        kinds = list(session.scalars(select(Event.kind).where(Event.job_id == job_id)))
    return job, kinds, kaggle, local


def test_a_spent_quota_moves_the_job_to_local_where_spec_and_operator_allow_it(
    database: Database, tmp_path: Path
) -> None:
    job, kinds, kaggle, local = _visit(database, tmp_path, "local", allowed=True)
    assert job.backend == "local"
    assert job.spec["backend"] == "local"
    assert job.spec.get("kaggle") is None
    assert job.state == JobState.RUNNING.value
    assert "moved" in kinds
    assert "quota_exhausted" not in kinds
    assert kaggle.launches() == []
    assert len(local.launches()) == 1  # launched there in the same visit


@pytest.mark.parametrize(
    ("policy", "allowed"), [("wait", True), ("local", False)], ids=["spec-waits", "not-allowed"]
)
def test_otherwise_the_job_waits_for_the_refresh(
    database: Database, tmp_path: Path, policy: str, allowed: bool
) -> None:
    job, kinds, kaggle, local = _visit(database, tmp_path, policy, allowed)
    assert job.backend == "kaggle"
    assert job.state == JobState.WAITING.value
    assert job.wait_until is not None
    assert "moved" not in kinds
    assert "quota_exhausted" in kinds
    assert kaggle.launches() == local.launches() == []
