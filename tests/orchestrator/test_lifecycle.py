"""Every (from, to) pair of the job and segment lifecycles, written through the CAS function to a
real database, and the rules that choose among them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import product

import pytest
from sqlalchemy import select

from orchestrator.db import Database
from orchestrator.lifecycle import (
    ACTIVE_SEGMENT_STATES,
    FINISHED_JOB_STATES,
    ActionConflict,
    JobChanges,
    JobState,
    JobView,
    SegmentEnd,
    SegmentState,
    UserAction,
    decide_quota,
    decide_segment_end,
    decide_user_action,
    job_transition_allowed,
    segment_transition_allowed,
)
from orchestrator.models import Event, Job, Segment, User
from orchestrator.transitions import IllegalTransition, StaleState, set_job_state, set_segment_state
from tests.factories import job_spec
from tests.orchestrator import lifecycle_oracle as oracle

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


@pytest.fixture
def db(migrated_db: Database) -> Database:
    with migrated_db.transaction() as session:
        session.add(User(id="u1", name="alice"))
    return migrated_db


def _add_job(db: Database, state: JobState) -> str:
    with db.transaction() as session:
        job = Job(
            id=f"j-{state}",
            user_id="u1",
            name="t",
            backend="local",
            state=state.value,
            spec=job_spec(),
            total_steps=50,
        )
        session.add(job)
    return job.id


def test_the_state_sets_are_the_documented_ones() -> None:
    assert {state.value for state in JobState} == set(oracle.JOB)
    assert {state.value for state in SegmentState} == set(oracle.SEGMENT)
    assert {state.value for state in ACTIVE_SEGMENT_STATES} == oracle.ACTIVE_SEGMENT_STATES
    assert {state.value for state in FINISHED_JOB_STATES} == oracle.FINISHED_JOB_STATES


def test_the_transition_tables_have_exactly_the_documented_edges() -> None:
    """One wrong edge added to (or dropped from) either table fails here, naming the edge."""
    coded_jobs = {
        (source.value, target.value)
        for source in JobState
        for target in JobState
        if job_transition_allowed(source, target)
    }
    coded_segments = {
        (source.value, target.value)
        for source in SegmentState
        for target in SegmentState
        if segment_transition_allowed(source, target)
    }
    assert coded_jobs - oracle.edges(oracle.JOB) == set(), "undocumented job edges"
    assert oracle.edges(oracle.JOB) - coded_jobs == set(), "documented job edges missing"
    assert coded_segments - oracle.edges(oracle.SEGMENT) == set(), "undocumented segment edges"
    assert oracle.edges(oracle.SEGMENT) - coded_segments == set(), "segment edges missing"


JOB_PAIRS = list(product(sorted(oracle.JOB), sorted(oracle.JOB)))
SEGMENT_PAIRS = list(product(sorted(oracle.SEGMENT), sorted(oracle.SEGMENT)))


@pytest.mark.parametrize(("source", "target"), JOB_PAIRS)
def test_job_transition_pairs(db: Database, source: str, target: str) -> None:
    """Each (from, to) pair through the CAS writer; the expected answer comes from the oracle."""
    job_id = _add_job(db, JobState(source))
    allowed = oracle.allowed(oracle.JOB, source, target)
    with db.transaction() as session:
        if allowed:
            set_job_state(
                session, job_id, JobState(source), JobState(target), event="test", now=NOW
            )
        else:
            with pytest.raises(IllegalTransition):
                set_job_state(
                    session, job_id, JobState(source), JobState(target), event="test", now=NOW
                )
    with db.transaction() as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert job.state == (target if allowed else source)
        events = session.scalars(select(Event).where(Event.job_id == job_id)).all()
        assert [(e.from_state, e.to_state) for e in events] == (
            [(source, target)] if allowed else []
        )


@pytest.mark.parametrize(("source", "target"), SEGMENT_PAIRS)
def test_segment_transition_pairs(db: Database, source: str, target: str) -> None:
    job_id = _add_job(db, JobState.RUNNING)
    with db.transaction() as session:
        segment = Segment(
            job_id=job_id,
            index=0,
            state=source,
            launch_id=f"{job_id}-0000",
            start_step=0,
            limit_seconds=60,
            launch_spec={},
        )
        session.add(segment)
    allowed = oracle.allowed(oracle.SEGMENT, source, target)
    with db.transaction() as session:
        if allowed:
            set_segment_state(session, segment, SegmentState(target), now=NOW)
        else:
            with pytest.raises(IllegalTransition):
                set_segment_state(session, segment, SegmentState(target), now=NOW)
    with db.transaction() as session:
        stored = session.get(Segment, segment.id)
        assert stored is not None
        assert stored.state == (target if allowed else source)
        events = session.scalars(select(Event).where(Event.job_id == job_id)).all()
        assert [(e.from_state, e.to_state) for e in events] == (
            [(source, target)] if allowed else []
        )


def test_segment_compare_and_set_refuses_a_stale_expected_state(db: Database) -> None:
    """Two writers that both read a running segment: the second loses and writes nothing."""
    job_id = _add_job(db, JobState.RUNNING)
    with db.transaction() as session:
        session.add(
            Segment(
                job_id=job_id,
                index=0,
                state=SegmentState.RUNNING.value,
                launch_id=f"{job_id}-0000",
                start_step=0,
                limit_seconds=60,
                launch_spec={},
            )
        )
    with db.transaction() as session:
        first_view = session.scalars(select(Segment).where(Segment.job_id == job_id)).one()
        session.expunge(first_view)
    with db.transaction() as session:
        second_view = session.scalars(select(Segment).where(Segment.job_id == job_id)).one()
        session.expunge(second_view)
    with db.transaction() as session:
        set_segment_state(session, first_view, SegmentState.SUCCEEDED, end_step=40, now=NOW)
    with pytest.raises(StaleState), db.transaction() as session:
        set_segment_state(session, second_view, SegmentState.FAILED, error="late writer", now=NOW)
    with db.transaction() as session:
        stored = session.scalars(select(Segment).where(Segment.job_id == job_id)).one()
        assert (stored.state, stored.end_step, stored.error) == ("succeeded", 40, None)
        events = session.scalars(select(Event).where(Event.job_id == job_id)).all()
        assert [e.to_state for e in events] == ["succeeded"]


def test_compare_and_set_refuses_a_stale_expected_state(db: Database) -> None:
    job_id = _add_job(db, JobState.QUEUED)
    with db.transaction() as session:
        set_job_state(session, job_id, JobState.QUEUED, JobState.RUNNING, event="first", now=NOW)
    with pytest.raises(StaleState), db.transaction() as session:
        # A second writer that still believes the job is queued loses, and writes nothing.
        set_job_state(session, job_id, JobState.QUEUED, JobState.PAUSED, event="second", now=NOW)
    with db.transaction() as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert job.state == JobState.RUNNING.value


def _view(state: JobState, **kw: object) -> JobView:
    values: dict[str, object] = {
        "steps_done": 10,
        "total_steps": 100,
        "failures": 0,
        "max_failures": 2,
    }
    values.update(kw)
    return JobView(state=state, **values)  # type: ignore[arg-type]


ACTION_OUTCOMES = {
    # (state, action) -> next state; None stays (a flag changes); absent raises ActionConflict.
    (JobState.QUEUED, UserAction.CANCEL): JobState.CANCELLED,
    (JobState.RUNNING, UserAction.CANCEL): JobState.CANCELLED,
    (JobState.WAITING, UserAction.CANCEL): JobState.CANCELLED,
    (JobState.PAUSED, UserAction.CANCEL): JobState.CANCELLED,
    (JobState.QUEUED, UserAction.PAUSE): JobState.PAUSED,
    (JobState.WAITING, UserAction.PAUSE): JobState.PAUSED,
    (JobState.RUNNING, UserAction.PAUSE): None,
    (JobState.PAUSED, UserAction.RESUME): JobState.QUEUED,
    (JobState.FAILED, UserAction.RESUME): JobState.QUEUED,
}


@pytest.mark.parametrize(("state", "action"), list(product(JobState, UserAction)))
def test_user_actions(state: JobState, action: UserAction) -> None:
    if (state, action) not in ACTION_OUTCOMES:
        with pytest.raises(ActionConflict):
            decide_user_action(_view(state), action)
        return
    decision = decide_user_action(_view(state), action)
    assert decision.to_state == ACTION_OUTCOMES[(state, action)]
    if decision.to_state is not None:
        assert oracle.allowed(oracle.JOB, state.value, decision.to_state.value)


def test_pause_of_a_running_job_waits_for_the_segment_then_pauses() -> None:
    decision = decide_user_action(_view(JobState.RUNNING), UserAction.PAUSE)
    assert decision.changes == JobChanges(pause_requested=True)
    with pytest.raises(ActionConflict):
        decide_user_action(_view(JobState.RUNNING, pause_requested=True), UserAction.PAUSE)
    ended = decide_segment_end(
        _view(JobState.RUNNING, pause_requested=True), SegmentEnd(True, 40, "stopped")
    )
    assert ended.to_state is JobState.PAUSED
    assert ended.changes.steps_done == 40


def test_committed_segment_chains_the_next_or_finishes() -> None:
    more = decide_segment_end(_view(JobState.RUNNING), SegmentEnd(True, 60, "deadline"))
    assert more.to_state is JobState.QUEUED
    assert more.changes == JobChanges(steps_done=60, failures=0)
    done = decide_segment_end(_view(JobState.RUNNING), SegmentEnd(True, 100, "completed"))
    assert done.to_state is JobState.SUCCEEDED


def test_failures_retry_until_max_failures_then_fail_with_the_reason() -> None:
    first = decide_segment_end(_view(JobState.RUNNING), SegmentEnd(False, None, "killed"))
    assert (first.to_state, first.changes.failures) == (JobState.QUEUED, 1)
    last_retry = decide_segment_end(
        _view(JobState.RUNNING, failures=1), SegmentEnd(False, None, "killed")
    )
    assert last_retry.to_state is JobState.QUEUED
    fatal = decide_segment_end(_view(JobState.RUNNING, failures=2), SegmentEnd(False, None, "oom"))
    assert fatal.to_state is JobState.FAILED
    assert "oom" in str(fatal.changes.reason)


def test_a_segment_that_ends_after_cancel_leaves_the_job_cancelled() -> None:
    decision = decide_segment_end(_view(JobState.CANCELLED), SegmentEnd(True, 50, "deadline"))
    assert decision.to_state is None


def test_quota_parks_and_wakes_jobs() -> None:
    now = datetime(2026, 11, 21, tzinfo=UTC)
    later = now + timedelta(hours=3)
    park = decide_quota(_view(JobState.QUEUED), later, now)
    assert park is not None
    assert park.to_state is JobState.WAITING
    assert decide_quota(_view(JobState.WAITING), later, now) is None
    wake = decide_quota(_view(JobState.WAITING), later, later)
    assert wake is not None
    assert wake.to_state is JobState.QUEUED


def test_a_segment_that_commits_no_new_step_counts_as_a_failure() -> None:
    stuck = SegmentEnd(True, 10, "deadline", progressed=False)
    retry = decide_segment_end(_view(JobState.RUNNING), stuck)
    assert retry.to_state is JobState.QUEUED
    assert retry.changes == JobChanges(steps_done=10, failures=1)
    fatal = decide_segment_end(_view(JobState.RUNNING, failures=2), stuck)
    assert fatal.to_state is JobState.FAILED
    assert "no new step" in str(fatal.changes.reason)


def test_a_requested_stop_before_the_first_step_pauses_without_a_failure() -> None:
    stopped = SegmentEnd(True, 10, "stopped", progressed=False)
    decision = decide_segment_end(_view(JobState.RUNNING, pause_requested=True), stopped)
    assert decision.to_state is JobState.PAUSED
    assert decision.changes.failures == 0
