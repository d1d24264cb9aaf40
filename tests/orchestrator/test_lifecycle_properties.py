"""Properties of the lifecycle decisions (orchestrator/lifecycle.py), over generated jobs and
segment ends. The expected edges come from the hand-written oracle, never from the code's table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.lifecycle import (
    ActionConflict,
    JobState,
    JobView,
    SegmentEnd,
    UserAction,
    decide_launch_failure,
    decide_quota,
    decide_segment_end,
    decide_user_action,
)
from tests.orchestrator.lifecycle_oracle import JOB, allowed

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


ANY_STATE = st.sampled_from(JobState)


@st.composite
def jobs(draw: st.DrawFn, state: st.SearchStrategy[JobState] = ANY_STATE) -> JobView:
    total = draw(st.integers(1, 10**6))
    max_failures = draw(st.integers(0, 10))
    return JobView(
        state=draw(state),
        steps_done=draw(st.integers(0, total)),
        total_steps=total,
        failures=draw(st.integers(0, max_failures)),
        max_failures=max_failures,
        pause_requested=draw(st.booleans()),
    )


@st.composite
def segment_ends(draw: st.DrawFn, job: JobView) -> SegmentEnd:
    committed = draw(st.booleans())
    end_step = draw(st.integers(job.steps_done, job.total_steps + 10)) if committed else None
    return SegmentEnd(
        committed=committed,
        end_step=end_step,
        reason=draw(st.sampled_from(["deadline", "paused", "crashed", "killed"])),
        progressed=draw(st.booleans()) if committed and end_step != job.steps_done else False,
    )


def _allowed(source: JobState, target: JobState | None) -> bool:
    return target is None or allowed(JOB, source.value, target.value)


@given(data=st.data(), job=jobs(st.just(JobState.RUNNING)))
def test_a_segment_end_never_takes_an_edge_the_lifecycle_forbids(
    data: st.DataObject, job: JobView
) -> None:
    end = data.draw(segment_ends(job))
    decision = decide_segment_end(job, end)
    assert _allowed(job.state, decision.to_state)


@given(data=st.data(), job=jobs(st.just(JobState.RUNNING)))
def test_failures_count_up_to_the_limit_and_a_commit_with_progress_resets_them(
    data: st.DataObject, job: JobView
) -> None:
    end = data.draw(segment_ends(job))
    decision = decide_segment_end(job, end)
    failures = decision.changes.failures
    finished = end.committed and end.end_step is not None and end.end_step >= job.total_steps
    counted = not end.committed or (not end.progressed and not job.pause_requested)
    if finished:
        assert (decision.to_state, failures) == (JobState.SUCCEEDED, 0)
    elif counted:
        assert failures == job.failures + 1
        assert (decision.to_state is JobState.FAILED) == (failures > job.max_failures)
    else:
        assert failures == 0
        assert decision.to_state in (JobState.QUEUED, JobState.PAUSED)
    if decision.to_state is not JobState.SUCCEEDED and decision.to_state is not JobState.FAILED:
        # A requested pause is honoured at the segment's end, never lost to a new launch.
        assert (decision.to_state is JobState.PAUSED) == job.pause_requested


@given(job=jobs(), reason=st.text(max_size=20))
def test_a_refused_launch_counts_one_failure_and_fails_only_past_the_limit(
    job: JobView, reason: str
) -> None:
    decision = decide_launch_failure(job, reason)
    assert decision.changes.failures == job.failures + 1
    assert (decision.to_state is JobState.FAILED) == (job.failures + 1 > job.max_failures)


@given(job=jobs(), action=st.sampled_from(UserAction))
def test_a_user_action_moves_only_along_the_documented_edges_or_is_refused(
    job: JobView, action: UserAction
) -> None:
    try:
        decision = decide_user_action(job, action)
    except ActionConflict:
        return  # a 409 (its text: test_lifecycle_decisions.py)
    assert _allowed(job.state, decision.to_state)


@given(
    job=jobs(st.sampled_from([JobState.QUEUED, JobState.WAITING, JobState.RUNNING])),
    refresh_in=st.one_of(st.none(), st.integers(-7 * 86400, 7 * 86400)),
)
def test_quota_parks_only_until_a_future_refresh_and_wakes_only_once_it_passed(
    job: JobView, refresh_in: int | None
) -> None:
    refresh_at = None if refresh_in is None else NOW + timedelta(seconds=refresh_in)
    decision = decide_quota(job, refresh_at, NOW)
    future = refresh_at is not None and refresh_at > NOW
    if decision is None:
        assert job.state is JobState.RUNNING or (job.state is JobState.QUEUED) != future
        return
    assert _allowed(job.state, decision.to_state)
    if decision.to_state is JobState.WAITING:
        assert job.state is JobState.QUEUED
        assert future
        assert decision.changes.wait_until == refresh_at
    else:
        assert (job.state, decision.to_state) == (JobState.WAITING, JobState.QUEUED)
        assert not future
