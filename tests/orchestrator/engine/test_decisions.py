"""A lifecycle decision on a job row (orchestrator/engine/decisions.py): the view the pure rules
read is the job as stored, and applying a decision moves the row, sets its fields and logs one
event with the reason clipped to what is stored. On a real (SQLite) database."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select

from orchestrator.db import Database
from orchestrator.engine.decisions import apply_decision, job_view
from orchestrator.lifecycle import Decision, JobChanges, JobState, JobView
from orchestrator.models import Event, Job, User
from tests.factories import job_spec
from worker.boundary.text import TEXT_LIMIT

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def stored_job(**overrides: Any) -> Job:
    values: dict[str, Any] = {
        "id": "j1",
        "user_id": "u1",
        "name": "t",
        "backend": "local",
        "state": "running",
        "spec": job_spec(retry={"max_failures": 4}),
        "total_steps": 50,
        "steps_done": 20,
        "failures": 1,
        "pause_requested": False,
    }
    values.update(overrides)
    return Job(**values)


def test_the_rules_see_the_job_as_stored() -> None:
    assert job_view(stored_job()) == JobView(
        state=JobState.RUNNING,
        steps_done=20,
        total_steps=50,
        failures=1,
        max_failures=4,
        pause_requested=False,
        rollback_on_divergence=False,
        rollbacks=0,
    )
    paused = job_view(stored_job(state="queued", pause_requested=True), rollbacks=2)
    assert (paused.state, paused.pause_requested, paused.rollbacks) == (JobState.QUEUED, True, 2)


@pytest.mark.parametrize(
    ("watchdog", "rollback"),
    [
        (None, False),
        ({}, False),
        ({"on_divergence": "fail"}, False),
        ({"on_divergence": "rollback"}, True),
    ],
)
def test_only_on_divergence_rollback_lets_the_rules_roll_back(
    watchdog: dict[str, Any] | None, rollback: bool
) -> None:
    spec = job_spec()
    if watchdog is not None:
        spec["session"] = {**spec["session"], "watchdog": watchdog}
    assert job_view(stored_job(spec=spec)).rollback_on_divergence is rollback


@pytest.fixture
def db(sqlite_db: Database) -> Database:
    with sqlite_db.transaction() as session:
        session.add(User(id="u1", name="alice"))
    with sqlite_db.transaction() as session:
        session.add(stored_job())
    return sqlite_db


def test_a_decision_moves_the_job_sets_its_fields_and_logs_one_event(db: Database) -> None:
    reason = "x" * (TEXT_LIMIT + 500)
    decision = Decision(JobState.FAILED, JobChanges(failures=5), "failed", reason)
    with db.transaction() as session:
        job = session.get(Job, "j1")
        assert job is not None
        apply_decision(session, job, decision, JobChanges(reason="worker crashed"), now=NOW)
    with db.transaction() as session:
        job = session.get(Job, "j1")
        assert job is not None
        assert (job.state, job.failures, job.reason) == ("failed", 5, "worker crashed")
        events = list(session.scalars(select(Event).where(Event.job_id == "j1")))
    assert [(e.kind, e.from_state, e.to_state) for e in events] == [("failed", "running", "failed")]
    message = events[0].message
    assert message is not None
    assert len(message) == TEXT_LIMIT
    assert message == "x" * (TEXT_LIMIT - 1) + "…"


def test_a_decision_to_stay_updates_fields_only(db: Database) -> None:
    with db.transaction() as session:
        job = session.get(Job, "j1")
        assert job is not None
        stay = Decision(None, JobChanges(pause_requested=True), "pause_requested")
        apply_decision(session, job, stay, now=NOW)
    with db.transaction() as session:
        job = session.get(Job, "j1")
        assert job is not None
        assert (job.state, job.pause_requested) == ("running", True)
        kinds = [(e.kind, e.to_state, e.message) for e in session.scalars(select(Event))]
    assert kinds == [("pause_requested", "running", None)]


def _spec_job(spec: dict[str, object]) -> Job:
    return Job(
        id="j1",
        user_id="u1",
        backend="local",
        state="running",
        spec=spec,
        total_steps=50,
        steps_done=20,
        failures=1,
        pause_requested=False,
    )


def test_the_view_carries_the_submitted_retry_limit_and_divergence_policy() -> None:
    session = {"limit_seconds": 60, "watchdog": {"on_divergence": "rollback"}}
    view = job_view(_spec_job(job_spec(retry={"max_failures": 5}, session=session)), rollbacks=1)
    assert (view.state, view.steps_done, view.failures) == (JobState.RUNNING, 20, 1)
    assert (view.max_failures, view.rollback_on_divergence, view.rollbacks) == (5, True, 1)


def test_the_defaults_are_the_spec_s_own() -> None:
    spec = job_spec()
    del spec["retry"]
    view = job_view(_spec_job(spec))
    assert (view.max_failures, view.rollback_on_divergence) == (3, False)
