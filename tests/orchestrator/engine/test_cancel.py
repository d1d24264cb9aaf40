"""Cancelling a segment: a Kaggle job whose owner deleted the credentials, then cancelled it,
still ends within two looks with an event saying what may still run; a job cancelled before its
push reached the backend ends at once with nothing started (on the fake backend)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import select

from orchestrator.backends.base import Transient
from orchestrator.db import Database
from orchestrator.lifecycle import UserAction
from orchestrator.models import Event
from orchestrator.service import Services
from tests.factories import kaggle_spec, make_settings, running_api
from tests.kaggle_emulator import Emulator
from tests.support.clock import ManualClock
from tests.support.engine_runs import fake_engine, job_and_segments, submit_jobs, tick
from tests.support.fake_backend import FakeBackend


def test_cancel_ends_the_segment_even_without_credentials(
    tmp_path: Path, emulator: Emulator
) -> None:
    settings = make_settings(tmp_path / "data")
    with running_api(settings, embedded_loop=False, kaggle_url=emulator.url) as api:
        engine = _services(api).engine
        api.put("/api/v1/credentials/kaggle", json={"username": "alice", "key": "alice-key"})
        job_id = api.post("/api/v1/jobs", json=kaggle_spec()).json()["id"]
        engine.reconcile_job(job_id)
        [segment] = api.get(f"/api/v1/jobs/{job_id}/segments").json()
        assert segment["state"] == "running"

        assert api.delete("/api/v1/credentials/kaggle").status_code in (200, 204)
        assert api.post(f"/api/v1/jobs/{job_id}/cancel").json()["state"] == "cancelled"
        for _ in range(2):
            engine.reconcile_job(job_id)

        [segment] = api.get(f"/api/v1/jobs/{job_id}/segments").json()
        events = api.get(f"/api/v1/jobs/{job_id}/events").json()
    assert segment["state"] == "abandoned"
    [abandoned] = [event for event in events if event["kind"] == "segment_abandoned"]
    assert "no Kaggle credentials" in abandoned["message"]
    assert "may still be running" in abandoned["message"]


def _services(api: TestClient) -> Services:
    services: Services = api.app.state.services  # type: ignore[attr-defined]
    return services


def test_a_job_cancelled_before_its_push_reached_the_backend_ends_with_nothing_started(
    sqlite_db: Database, tmp_path: Path
) -> None:
    """The push failed on the way (a passing outage): the segment is `launching` with no handle
    and nothing runs under its launch id. A cancel then ends it at once as never started, tells
    the user so, and nothing is pushed afterwards."""
    clock = ManualClock()
    backend = FakeBackend(
        tmp_path / "fake",
        session_seconds=60,
        poll_seconds=1,
        clock=clock.seconds,
        faults={"launch": [Transient("connection reset by peer")]},
    )
    engine = fake_engine(sqlite_db, backend, tmp_path / "checkpoints", clock=clock)
    (job_id,) = submit_jobs(engine, 1)
    tick(engine, clock, 1)
    job, [segment] = job_and_segments(sqlite_db, job_id)
    assert (segment.state, segment.handle, backend.launches()) == ("launching", None, [])

    engine.act(job.user_id, job_id, UserAction.CANCEL)
    tick(engine, clock, 120)
    job, [segment] = job_and_segments(sqlite_db, job_id)
    assert (job.state, segment.state) == ("cancelled", "cancelled")
    assert segment.ended_at is not None
    assert backend.launches() == []
    assert backend.cancels() == []
    with sqlite_db.transaction() as session:
        messages = session.scalars(
            select(Event.message).where(
                Event.job_id == job_id, Event.segment_index == segment.index
            )
        ).all()
    assert any("before it started" in (message or "") for message in messages), messages
