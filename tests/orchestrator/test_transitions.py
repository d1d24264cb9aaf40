"""What the compare-and-set writer changes and leaves in the event log: only the row it names, the
job's start and end times, the segment an event is about, its message capped at 4000 characters,
and a loser's StaleState naming the job or segment and the state it expected. On a real (SQLite)
database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from orchestrator.db import Database
from orchestrator.lifecycle import JobChanges, JobState, SegmentState
from orchestrator.models import Event, Job, Segment, User
from orchestrator.transitions import StaleState, record_event, set_job_state, set_segment_state
from tests.factories import job_spec

# The engine's clock, far from the wall clock: every stamp must come from it.
NOW = datetime(2031, 5, 17, 9, 30, tzinfo=UTC)


@pytest.fixture
def db(sqlite_db: Database) -> Database:
    with sqlite_db.transaction() as session:
        session.add(User(id="u1", name="alice"))
    _add_job(sqlite_db, "j1")
    return sqlite_db


def _add_job(db: Database, job_id: str) -> None:
    with db.transaction() as session:
        session.add(
            Job(
                id=job_id,
                user_id="u1",
                name="t",
                backend="local",
                state="queued",
                spec=job_spec(),
                total_steps=50,
            )
        )


def _add_running_segment(db: Database, job_id: str, index: int) -> Segment:
    with db.transaction() as session:
        segment = Segment(
            job_id=job_id,
            index=index,
            state=SegmentState.RUNNING.value,
            launch_id=f"{job_id}-{index:04d}",
            start_step=0,
            limit_seconds=60,
            launch_spec={},
        )
        session.add(segment)
        session.flush()
        session.expunge(segment)
    return segment


def _states(db: Database, model: type[Job] | type[Segment]) -> list[str]:
    with db.transaction() as session:
        return [row.state for row in session.scalars(select(model).order_by(model.id))]


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
        set_job_state(
            session, "j1", JobState.QUEUED, JobState.PAUSED, event="paused", message="m", now=NOW
        )
    [event] = _events(db)
    assert (event.kind, event.from_state, event.to_state, event.message) == (
        "paused",
        "queued",
        "paused",
        "m",
    )


def test_the_loser_of_a_compare_and_set_is_told_which_job_moved(db: Database) -> None:
    with pytest.raises(StaleState) as lost, db.transaction() as session:
        set_job_state(session, "j1", JobState.RUNNING, JobState.QUEUED, event="x", now=NOW)
    assert str(lost.value) == "job j1 is no longer running"
    assert _events(db) == []


def test_a_compare_and_set_moves_only_the_job_or_segment_it_names(db: Database) -> None:
    _add_job(db, "j2")  # in the same state as j1
    first = _add_running_segment(db, "j1", 0)
    _add_running_segment(db, "j2", 0)
    with db.transaction() as session:
        set_job_state(session, "j1", JobState.QUEUED, JobState.PAUSED, event="paused", now=NOW)
        set_segment_state(session, first, SegmentState.SUCCEEDED, end_step=10, now=NOW)
    assert _states(db, Job) == ["paused", "queued"]
    assert _states(db, Segment) == ["succeeded", "running"]


def test_a_segment_change_is_one_event_with_its_index_both_states_and_the_message(
    db: Database,
) -> None:
    segment = _add_running_segment(db, "j1", 3)
    with db.transaction() as session:
        set_segment_state(session, segment, SegmentState.FAILED, message="exit code 1", now=NOW)
    [event] = _events(db)
    assert (
        event.kind,
        event.segment_index,
        event.from_state,
        event.to_state,
        event.message,
    ) == ("segment_failed", 3, "running", "failed", "exit code 1")


def test_the_loser_of_a_segment_compare_and_set_is_told_which_segment_moved(db: Database) -> None:
    segment = _add_running_segment(db, "j1", 2)
    with db.transaction() as session:
        set_segment_state(session, segment, SegmentState.SUCCEEDED, end_step=10, now=NOW)
    with pytest.raises(StaleState) as lost, db.transaction() as session:
        set_segment_state(
            session, segment, SegmentState.FAILED, now=NOW
        )  # its view still says running
    assert str(lost.value) == "segment j1-0002 is no longer running"
    assert [event.to_state for event in _events(db)] == ["succeeded"]


def test_running_stamps_started_at_an_end_stamps_finished_at_and_a_resume_clears_it(
    db: Database,
) -> None:
    def times() -> tuple[object, object]:
        with db.transaction() as session:
            job = session.get(Job, "j1")
            assert job is not None
            return job.started_at, job.finished_at

    steps = [
        (JobState.QUEUED, JobState.PAUSED, (False, False)),
        (JobState.PAUSED, JobState.QUEUED, (False, False)),
        (JobState.QUEUED, JobState.RUNNING, (True, False)),
        (JobState.RUNNING, JobState.FAILED, (True, True)),
        (JobState.FAILED, JobState.QUEUED, (True, False)),
    ]
    for expected, target, (started, finished) in steps:
        with db.transaction() as session:
            set_job_state(session, "j1", expected, target, event=target.value, now=NOW)
        started_at, finished_at = times()
        assert (started_at is not None, finished_at is not None) == (started, finished), target


def test_job_changes_write_what_they_set_clear_what_they_set_to_none_and_keep_the_rest(
    db: Database,
) -> None:
    with db.transaction() as session:
        set_job_state(
            session,
            "j1",
            JobState.QUEUED,
            None,
            event="x",
            changes=JobChanges(failures=2, reason="r", queue_reason="no slot"),
            now=NOW,
        )
        set_job_state(
            session,
            "j1",
            JobState.QUEUED,
            None,
            event="y",
            changes=JobChanges(reason=None) | JobChanges(steps_done=5),
            now=NOW,
        )
    with db.transaction() as session:
        job = session.get(Job, "j1")
        assert job is not None
        found = (job.failures, job.reason, job.queue_reason, job.steps_done)
    assert found == (2, None, "no slot", 5)


def test_every_stamp_is_the_engine_s_clock_read_back_as_aware_utc(db: Database) -> None:
    with db.transaction() as session:
        set_job_state(session, "j1", JobState.QUEUED, JobState.RUNNING, event="r", now=NOW)
        later = NOW + timedelta(hours=1)
        set_job_state(session, "j1", JobState.RUNNING, JobState.FAILED, event="f", now=later)
    with db.transaction() as session:
        job = session.get(Job, "j1")
        assert job is not None
        stamps = (job.started_at, job.finished_at, job.updated_at)
    assert stamps == (NOW, later, later)
    assert all(stamp is not None and stamp.tzinfo is UTC for stamp in stamps)
    assert [event.created_at for event in _events(db)] == [NOW, later]


def test_a_segment_event_is_stamped_by_the_engine_s_clock(db: Database) -> None:
    # A user reads each event's time beside the job's own stamps, all from the engine's clock.
    segment = _add_running_segment(db, "j1", 0)
    with db.transaction() as session:
        set_segment_state(session, segment, SegmentState.SUCCEEDED, end_step=10, now=NOW)
    assert [event.created_at for event in _events(db)] == [NOW]


def test_a_naive_time_is_refused_rather_than_guessed(db: Database) -> None:
    naive = datetime(2031, 5, 17, 9, 30)
    with pytest.raises(Exception, match="naive datetime"), db.transaction() as session:
        set_job_state(session, "j1", JobState.QUEUED, JobState.RUNNING, event="r", now=naive)


def test_text_the_databases_refuse_is_written_with_a_replacement_character(db: Database) -> None:
    # A backend's error text may hold NUL or a lone surrogate (bytes decoded with
    # surrogateescape); PostgreSQL refuses both and SQLite the surrogate, which would fail the
    # write of the very failure it reports.
    text = "CUDA error\x00 at \udcff step 2"
    segment = _add_running_segment(db, "j1", 0)
    with db.transaction() as session:
        set_job_state(
            session,
            "j1",
            JobState.QUEUED,
            None,
            event="x",
            changes=JobChanges(reason=text),
            now=NOW,
        )
        set_segment_state(session, segment, SegmentState.FAILED, error=text, now=NOW)
    with db.transaction() as session:
        job = session.get(Job, "j1")
        failed = session.get(Segment, segment.id)
        assert job is not None
        assert failed is not None
        stored = (job.reason, failed.error)
    assert stored == ("CUDA error\ufffd at \ufffd step 2",) * 2
