"""Cancelling a segment: a Kaggle job whose owner deleted the credentials, then cancelled it,
still ends within two looks with an event saying what may still run; a job cancelled before its
push reached the backend ends at once with nothing started (on the fake backend)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from orchestrator import queries
from orchestrator.backends.base import LaunchRequest, Rejected, Transient
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
    assert messages == ["cancelled before it started"]


class CannotStop(FakeBackend):
    """Kaggle's shape: a started session cannot be stopped through the API (`cancel` says so)."""

    def cancel(self, handle: str) -> bool:
        self._enter("cancel")
        return False


class PushAnswerLost(CannotStop):
    """The push goes through but its answer is lost: the engine stores no handle."""

    def launch(self, request: LaunchRequest) -> str:
        super().launch(request)
        raise TimeoutError("the read timed out after the push was sent")


class RefusesTheCancel(FakeBackend):
    """The backend refuses every call about the session for good (a revoked key)."""

    def cancel(self, handle: str) -> bool:
        raise Rejected("401 Unauthorized: the key was revoked")


NOT_STOPPABLE = (
    "the local session cannot be stopped from here: it was asked to stop through its control "
    "channel where it has one (a Kaggle kernel with internet and the BATON_KAGGLE_KEY Secret), "
    "and otherwise may keep running until it ends on its own; its slot stays counted until it "
    "is seen to end"
)


@pytest.mark.parametrize(
    ("backend_type", "told"),
    [
        (FakeBackend, [("segment_cancelled", "job cancelled")]),
        (
            CannotStop,
            [
                ("segment_cancelling", NOT_STOPPABLE),
                ("segment_cancelled", "the session has ended"),
            ],
        ),
        (
            PushAnswerLost,
            [
                ("segment_running", "found under its launch id after the launch's answer was lost"),
                ("segment_cancelling", NOT_STOPPABLE),
                ("segment_cancelled", "the session has ended"),
            ],
        ),
        (
            RefusesTheCancel,
            [
                (
                    "segment_abandoned",
                    "the backend cannot be reached (local refused: 401 Unauthorized: the key was "
                    "revoked); segment 0 ({launch_id}) may still be running on its backend until "
                    "its 60 s limit",
                )
            ],
        ),
    ],
)
def test_a_cancelled_segment_s_events_say_how_it_ended_and_what_may_still_run(
    sqlite_db: Database,
    tmp_path: Path,
    backend_type: type[FakeBackend],
    told: list[tuple[str, str]],
) -> None:
    """Pause and cancel, as the user reads it on the job page: a session that was stopped, one
    that cannot be stopped and keeps its slot until it is seen to end (found first, where the
    push's answer was lost), and one Baton can no longer reach, each in words."""
    clock = ManualClock()
    backend = backend_type(
        tmp_path / "fake", session_seconds=30, poll_seconds=1, clock=clock.seconds
    )
    engine = fake_engine(sqlite_db, backend, tmp_path / "checkpoints", clock=clock)
    (job_id,) = submit_jobs(engine, 1)
    tick(engine, clock, 1)
    job, _ = job_and_segments(sqlite_db, job_id)
    with sqlite_db.transaction() as session:
        before = queries.list_events(session, job.user_id, job_id)[-1].id

    engine.act(job.user_id, job_id, UserAction.CANCEL)
    tick(engine, clock, 60)
    job, [segment] = job_and_segments(sqlite_db, job_id)
    with sqlite_db.transaction() as session:
        events = queries.list_events(session, job.user_id, job_id, after=before)
    assert job.state == "cancelled"
    assert [(e.kind, e.message) for e in events if e.segment_index == 0] == [
        (kind, message.format(launch_id=segment.launch_id)) for kind, message in told
    ]
