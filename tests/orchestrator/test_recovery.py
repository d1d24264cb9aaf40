"""Crash recovery: an orchestrator that dies around a launch never launches a segment twice."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.auth import ADMIN_USER, get_or_create_user
from orchestrator.backends.base import LaunchRequest
from orchestrator.backends.local.backend import LocalBackend
from orchestrator.backends.registry import StaticBackends
from orchestrator.config import Settings
from orchestrator.db import Database
from orchestrator.engine import Engine
from orchestrator.lifecycle import JobState, SegmentState
from orchestrator.models import Job, Segment
from orchestrator.spec import JobSpec
from tests.factories import job_spec


class OrchestratorDied(BaseException):
    """Stands in for the process dying: nothing after it runs."""


class CountingBackend(LocalBackend):
    """The real local backend, counting launches; optionally 'dies' before or after one."""

    def __init__(self, sessions_dir: Path, die: str | None = None) -> None:
        super().__init__(sessions_dir, grace_seconds=1)
        self.launches: list[str] = []
        self.die = die

    def launch(self, request: LaunchRequest) -> str:
        if self.die == "before":
            raise OrchestratorDied
        handle = super().launch(request)
        self.launches.append(request.launch_id)
        if self.die == "after":
            raise OrchestratorDied
        return handle


def _admin(store: Database) -> str:
    with store.transaction() as session:
        return get_or_create_user(session, ADMIN_USER).id


def _engine(store: Database, settings: Settings, backend: CountingBackend) -> Engine:
    return Engine(store, StaticBackends({"local": backend}), settings.checkpoints_dir)


def _run_to_end(engine: Engine, job_id: str, timeout: float = 120) -> Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        engine.reconcile_job(job_id)
        with engine.db.transaction() as session:
            job = session.get(Job, job_id)
            assert job is not None
            if job.state in ("succeeded", "failed", "cancelled"):
                return job
        time.sleep(0.1)
    raise AssertionError("job did not finish")


def _segments(store: Database, job_id: str) -> list[Segment]:
    with store.transaction() as session:
        return list(session.query(Segment).filter_by(job_id=job_id).order_by(Segment.index))


@pytest.mark.parametrize("moment", ["before", "after"])
def test_death_around_launch_never_launches_twice(
    store: Database, settings: Settings, moment: str
) -> None:
    dying = CountingBackend(settings.sessions_dir, die=moment)
    job = _engine(store, settings, dying).submit(_admin(store), JobSpec.model_validate(job_spec()))
    with pytest.raises(OrchestratorDied):
        _engine(store, settings, dying).reconcile_job(job.id)
    [segment] = _segments(store, job.id)
    assert segment.state == SegmentState.LAUNCHING  # the intent survived the death

    restarted = CountingBackend(settings.sessions_dir)
    finished = _run_to_end(_engine(store, settings, restarted), job.id)
    assert finished.state == JobState.SUCCEEDED
    # Died after pushing: the restarted engine found the session and launched nothing.
    # Died before pushing: it launched exactly once.
    launched = dying.launches + restarted.launches
    assert launched == [segment.launch_id]
    assert [s.state for s in _segments(store, job.id)] == [SegmentState.SUCCEEDED]


def test_restart_while_a_session_runs_collects_it(store: Database, settings: Settings) -> None:
    spec = job_spec(config={"step_sleep": 0.05}, total_steps=60)
    first = CountingBackend(settings.sessions_dir)
    engine = _engine(store, settings, first)
    job = engine.submit(_admin(store), JobSpec.model_validate(spec))
    engine.reconcile_job(job.id)  # launches, then the orchestrator goes away
    [segment] = _segments(store, job.id)
    assert segment.state == SegmentState.RUNNING

    second = CountingBackend(settings.sessions_dir)
    finished = _run_to_end(_engine(store, settings, second), job.id)
    assert finished.state == JobState.SUCCEEDED
    assert (first.launches, second.launches) == ([segment.launch_id], [])
