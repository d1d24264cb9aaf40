"""Every lifecycle decision, compared whole: the next state, every field it sets, the event kind
users and webhooks see, its message, and the 409 text of a refused action.

The expected values are written out here by hand, never computed by the rules under test. The
mutmut sweep (docs/testing.md) found that checking only `to_state` let a resumed failed job keep
its failure count, a withdrawn pause stay requested, and a success skip `steps_done`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from orchestrator.lifecycle import (
    NO_CHANGES,
    ActionConflict,
    Decision,
    JobChanges,
    JobState,
    JobView,
    SegmentEnd,
    UserAction,
    decide_launch_failure,
    decide_quota,
    decide_segment_end,
    decide_unlaunchable,
    decide_user_action,
)

RUNNING = JobView(JobState.RUNNING, steps_done=20, total_steps=100, failures=0, max_failures=2)
PAUSING = replace(RUNNING, pause_requested=True)
LAST_TRY = replace(RUNNING, failures=2)


def _view(state: JobState, **changes: Any) -> JobView:
    return replace(RUNNING, state=state, **changes)


ACTIONS: list[tuple[JobView, UserAction, Decision]] = [
    (
        PAUSING,
        UserAction.CANCEL,
        Decision(JobState.CANCELLED, JobChanges(pause_requested=False), "cancelled"),
    ),
    (
        _view(JobState.QUEUED),
        UserAction.CANCEL,
        Decision(JobState.CANCELLED, JobChanges(pause_requested=False), "cancelled"),
    ),
    (_view(JobState.QUEUED), UserAction.PAUSE, Decision(JobState.PAUSED, NO_CHANGES, "paused")),
    (_view(JobState.WAITING), UserAction.PAUSE, Decision(JobState.PAUSED, NO_CHANGES, "paused")),
    (
        RUNNING,
        UserAction.PAUSE,
        Decision(None, JobChanges(pause_requested=True), "pause_requested"),
    ),
    (_view(JobState.PAUSED), UserAction.RESUME, Decision(JobState.QUEUED, NO_CHANGES, "resumed")),
    (
        _view(JobState.FAILED, failures=3),
        UserAction.RESUME,
        Decision(JobState.QUEUED, JobChanges(failures=0, reason=None), "resumed"),
    ),
    (
        PAUSING,
        UserAction.RESUME,
        Decision(None, JobChanges(pause_requested=False), "pause_withdrawn"),
    ),
]


@pytest.mark.parametrize(("job", "action", "expected"), ACTIONS)
def test_each_allowed_action_decides_exactly(
    job: JobView, action: UserAction, expected: Decision
) -> None:
    assert decide_user_action(job, action) == expected


REFUSALS: list[tuple[JobView, UserAction, str]] = [
    (
        _view(JobState.SUCCEEDED),
        UserAction.CANCEL,
        "job is succeeded; only unfinished jobs can be cancelled",
    ),
    (
        _view(JobState.CANCELLED),
        UserAction.CANCEL,
        "job is cancelled; only unfinished jobs can be cancelled",
    ),
    (PAUSING, UserAction.PAUSE, "job is running (pause already requested)"),
    (_view(JobState.PAUSED), UserAction.PAUSE, "job is paused"),
    (RUNNING, UserAction.RESUME, "job is running; only paused or failed jobs can be resumed"),
    (
        _view(JobState.QUEUED, pause_requested=True),
        UserAction.RESUME,
        "job is queued; only paused or failed jobs can be resumed",
    ),
]


@pytest.mark.parametrize(("job", "action", "message"), REFUSALS)
def test_a_refused_action_says_why(job: JobView, action: UserAction, message: str) -> None:
    with pytest.raises(ActionConflict) as refused:
        decide_user_action(job, action)
    assert str(refused.value) == message


def _failed(failures: int, last: str, **fields: Any) -> Decision:
    message = f"{failures} consecutive failed segments; last: {last}"
    return Decision(
        JobState.FAILED,
        JobChanges(**fields, failures=failures, reason=message, pause_requested=False),
        "failed",
        message,
    )


NO_STEP = "the segment committed no new step"
DIVERGED = "diverged at step 47; last good checkpoint at step 20"
ROLLBACK = "resuming from it once with a different data-order seed"
ROLLING_BACK = replace(RUNNING, rollback_on_divergence=True)

SEGMENT_ENDS: list[tuple[JobView, SegmentEnd, Decision]] = [
    # Cancelled meanwhile: the job stays as the user set it.
    (
        _view(JobState.CANCELLED),
        SegmentEnd(True, 50, "deadline"),
        Decision(None, NO_CHANGES, "segment_ended_after_cancel", "deadline"),
    ),
    # Committed: chain the next segment, finish, or pause where a pause was asked for.
    (
        RUNNING,
        SegmentEnd(True, 60, "deadline"),
        Decision(
            JobState.QUEUED, JobChanges(steps_done=60, failures=0), "segment_committed", "deadline"
        ),
    ),
    (
        replace(RUNNING, failures=2),
        SegmentEnd(True, 60, "deadline"),
        Decision(
            JobState.QUEUED, JobChanges(steps_done=60, failures=0), "segment_committed", "deadline"
        ),
    ),
    (
        RUNNING,
        SegmentEnd(True, 100, "completed"),
        Decision(JobState.SUCCEEDED, JobChanges(steps_done=100, failures=0), "succeeded"),
    ),
    (
        RUNNING,
        SegmentEnd(True, 99, "deadline"),
        Decision(
            JobState.QUEUED, JobChanges(steps_done=99, failures=0), "segment_committed", "deadline"
        ),
    ),
    (
        PAUSING,
        SegmentEnd(True, 60, "stopped"),
        Decision(
            JobState.PAUSED,
            JobChanges(steps_done=60, failures=0, pause_requested=False),
            "segment_committed",
            "stopped",
        ),
    ),
    (
        PAUSING,
        SegmentEnd(True, 100, "completed"),
        Decision(JobState.SUCCEEDED, JobChanges(steps_done=100, failures=0), "succeeded"),
    ),
    # Not committed, whatever step it names: a failure, retried up to max_failures.
    (
        RUNNING,
        SegmentEnd(False, 40, "killed"),
        Decision(JobState.QUEUED, JobChanges(failures=1), "segment_failed", "killed"),
    ),
    (
        RUNNING,
        SegmentEnd(True, None, "no manifest"),
        Decision(JobState.QUEUED, JobChanges(failures=1), "segment_failed", "no manifest"),
    ),
    (
        replace(RUNNING, failures=1),
        SegmentEnd(False, None, "killed"),
        Decision(JobState.QUEUED, JobChanges(failures=2), "segment_failed", "killed"),
    ),
    (LAST_TRY, SegmentEnd(False, None, "oom"), _failed(3, "oom")),
    (replace(LAST_TRY, pause_requested=True), SegmentEnd(False, None, "oom"), _failed(3, "oom")),
    (
        PAUSING,
        SegmentEnd(False, None, "killed"),
        Decision(
            JobState.PAUSED,
            JobChanges(failures=1, pause_requested=False),
            "segment_failed",
            "killed",
        ),
    ),
    # Committed but no new step: a failure too (no infinite chaining), unless it was a pause.
    (
        RUNNING,
        SegmentEnd(True, 20, "deadline", progressed=False),
        Decision(JobState.QUEUED, JobChanges(steps_done=20, failures=1), "segment_failed", NO_STEP),
    ),
    (
        LAST_TRY,
        SegmentEnd(True, 20, "deadline", progressed=False),
        _failed(3, NO_STEP, steps_done=20),
    ),
    (
        PAUSING,
        SegmentEnd(True, 20, "stopped", progressed=False),
        Decision(
            JobState.PAUSED,
            JobChanges(steps_done=20, failures=0, pause_requested=False),
            "segment_committed",
            "stopped",
        ),
    ),
    # Diverged: retrying the same data order diverges again, so no retry is counted.
    (
        RUNNING,
        SegmentEnd(False, None, DIVERGED, diverged=True),
        Decision(
            JobState.FAILED,
            JobChanges(reason=DIVERGED, pause_requested=False),
            "diverged",
            DIVERGED,
        ),
    ),
    (
        ROLLING_BACK,
        SegmentEnd(False, None, DIVERGED, diverged=True),
        Decision(JobState.QUEUED, NO_CHANGES, "rolled_back", f"{DIVERGED}; {ROLLBACK}"),
    ),
    (
        replace(ROLLING_BACK, pause_requested=True),
        SegmentEnd(False, None, DIVERGED, diverged=True),
        Decision(
            JobState.PAUSED,
            JobChanges(pause_requested=False),
            "rolled_back",
            f"{DIVERGED}; {ROLLBACK}",
        ),
    ),
    # Rolled back once already: the second divergence fails the job.
    (
        replace(ROLLING_BACK, rollbacks=1),
        SegmentEnd(False, None, DIVERGED, diverged=True),
        Decision(
            JobState.FAILED,
            JobChanges(reason=DIVERGED, pause_requested=False),
            "diverged",
            DIVERGED,
        ),
    ),
]


@pytest.mark.parametrize(("job", "end", "expected"), SEGMENT_ENDS)
def test_each_segment_end_decides_exactly(
    job: JobView, end: SegmentEnd, expected: Decision
) -> None:
    assert decide_segment_end(job, end) == expected


def test_a_refused_launch_is_one_failure_like_a_failed_segment() -> None:
    reason = "launch refused: no such machine"
    assert decide_launch_failure(RUNNING, reason) == Decision(
        JobState.QUEUED, JobChanges(failures=1), "segment_failed", reason
    )
    assert decide_launch_failure(LAST_TRY, reason) == _failed(3, reason)
    assert decide_launch_failure(PAUSING, reason) == Decision(
        JobState.PAUSED, JobChanges(failures=1, pause_requested=False), "segment_failed", reason
    )


NOW = datetime(2026, 11, 21, tzinfo=UTC)
LATER = NOW + timedelta(hours=3)

QUOTA: list[tuple[JobState, datetime | None, Decision | None]] = [
    (
        JobState.QUEUED,
        LATER,
        Decision(
            JobState.WAITING,
            JobChanges(wait_until=LATER),
            "quota_exhausted",
            "quota spent; resumes after 2026-11-21T03:00:00+00:00",
        ),
    ),
    (JobState.QUEUED, NOW, None),  # refreshes this instant: nothing to wait for
    (JobState.QUEUED, None, None),
    (JobState.RUNNING, LATER, None),
    (JobState.PAUSED, LATER, None),
    (JobState.WAITING, LATER, None),
    (
        JobState.WAITING,
        NOW,
        Decision(JobState.QUEUED, JobChanges(wait_until=None), "quota_refreshed"),
    ),
    (
        JobState.WAITING,
        NOW - timedelta(seconds=1),
        Decision(JobState.QUEUED, JobChanges(wait_until=None), "quota_refreshed"),
    ),
    (
        JobState.WAITING,
        None,
        Decision(JobState.QUEUED, JobChanges(wait_until=None), "quota_refreshed"),
    ),
]


@pytest.mark.parametrize(("state", "refresh_at", "expected"), QUOTA)
def test_quota_parks_and_wakes_exactly(
    state: JobState, refresh_at: datetime | None, expected: Decision | None
) -> None:
    assert decide_quota(_view(state), refresh_at, NOW) == expected


def test_a_job_too_slow_to_start_for_its_sessions_fails_without_retries() -> None:
    reason = "sessions of 15 s are shorter than this job's measured start-up (30 s)"
    assert decide_unlaunchable(reason) == Decision(
        JobState.FAILED, JobChanges(reason=reason, pause_requested=False), "failed", reason
    )
