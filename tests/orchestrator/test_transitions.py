"""What the compare-and-set writer leaves in the event log: the segment an event is about, its
message capped at 4000 characters, and a loser's StaleState naming the job and the state it
expected. On a real (SQLite) database."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from orchestrator.db import Database
from orchestrator.lifecycle import JobState
from orchestrator.models import Event, Job, User
from orchestrator.transitions import StaleState, record_event, set_job_state
from tests.factories import job_spec


@pytest.fixture
def db(sqlite_db: Database) -> Database:
    with sqlite_db.transaction() as session:
        session.add(User(id="u1", name="alice"))
        session.flush()
        session.add(
            Job(
                id="j1",
                user_id="u1",
                name="t",
                backend="local",
                state="queued",
                spec=job_spec(),
                total_steps=50,
            )
        )
    return sqlite_db


def _events(db: Database) -> list[Event]:
    with db.transaction() as session:
        return list(session.scalars(select(Event).order_by(Event.id)))


def test_an_event_keeps_its_segment_and_at_most_4000_characters_of_message(db: Database) -> None:
    with db.transaction() as session:
        record_event(session, "j1", "segment_failed", segment_index=3, message="x" * 5000)
        record_event(session, "j1", "note", message="short")
        record_event(session, "j1", "quiet", message="")
    failed, note, quiet = _events(db)
    assert (failed.kind, failed.segment_index, failed.message) == ("segment_failed", 3, "x" * 4000)
    assert (note.segment_index, note.message) == (None, "short")
    assert quiet.message is None


def test_a_state_change_is_one_event_with_both_states_and_the_message(db: Database) -> None:
    with db.transaction() as session:
        set_job_state(session, "j1", JobState.QUEUED, JobState.PAUSED, event="paused", message="m")
    [event] = _events(db)
    assert (event.kind, event.from_state, event.to_state, event.message) == (
        "paused",
        "queued",
        "paused",
        "m",
    )


def test_the_loser_of_a_compare_and_set_is_told_which_job_moved(db: Database) -> None:
    with pytest.raises(StaleState) as lost, db.transaction() as session:
        set_job_state(session, "j1", JobState.RUNNING, JobState.QUEUED, event="x")
    assert str(lost.value) == "job j1 is no longer running"
    assert _events(db) == []
