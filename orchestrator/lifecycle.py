"""Lifecycle rules: pure functions from a job's state and an observed event to the next state.

No I/O here. The engine feeds in what it observed (a user action, a segment's end, a launch
failure, quota) and carries out the returned `Decision` through the compare-and-set writes in
`transitions.py`. The transition tables are the single source of truth for what may follow what;
`docs/lifecycle.md` draws them, and a test keeps the drawing honest.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any


class JobState(enum.StrEnum):
    QUEUED = "queued"  # waiting for its next segment to be launched
    RUNNING = "running"  # a segment is launching or running
    WAITING = "waiting"  # out of quota until wait_until
    PAUSED = "paused"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class SegmentState(enum.StrEnum):
    LAUNCHING = "launching"  # intent recorded; the backend may or may not have started it
    RUNNING = "running"  # the backend gave a handle
    SUCCEEDED = "succeeded"  # a checkpoint was committed and collected
    FAILED = "failed"  # crashed, killed, lost, or its checkpoint was rejected
    # The job was cancelled but the backend could not stop the session (Kaggle exposes no
    # session id): it keeps its slot until the session is seen to end.
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"
    # Baton can no longer reach the session (its backend cannot be built): it may still run on
    # the backend until its own limit. An event says what and where.
    ABANDONED = "abandoned"


JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset(
        {JobState.RUNNING, JobState.WAITING, JobState.PAUSED, JobState.CANCELLED, JobState.FAILED}
    ),
    JobState.RUNNING: frozenset(
        {
            JobState.QUEUED,
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.PAUSED,
            JobState.CANCELLED,
        }
    ),
    JobState.WAITING: frozenset(
        {JobState.QUEUED, JobState.PAUSED, JobState.CANCELLED, JobState.FAILED}
    ),
    JobState.PAUSED: frozenset({JobState.QUEUED, JobState.CANCELLED}),
    JobState.FAILED: frozenset({JobState.QUEUED}),  # resume: retry with a fresh failure budget
    JobState.SUCCEEDED: frozenset(),
    JobState.CANCELLED: frozenset(),
}

SEGMENT_TRANSITIONS: dict[SegmentState, frozenset[SegmentState]] = {
    SegmentState.LAUNCHING: frozenset(
        {
            SegmentState.RUNNING,
            SegmentState.FAILED,
            SegmentState.CANCELLED,
            SegmentState.ABANDONED,
        }
    ),
    SegmentState.RUNNING: frozenset(
        {
            SegmentState.SUCCEEDED,
            SegmentState.FAILED,
            SegmentState.CANCELLING,
            SegmentState.CANCELLED,
            SegmentState.ABANDONED,
        }
    ),
    SegmentState.CANCELLING: frozenset({SegmentState.CANCELLED, SegmentState.ABANDONED}),
    SegmentState.SUCCEEDED: frozenset(),
    SegmentState.FAILED: frozenset(),
    SegmentState.CANCELLED: frozenset(),
    SegmentState.ABANDONED: frozenset(),
}

# Segments that hold a slot: the session may be running.
ACTIVE_SEGMENT_STATES = frozenset(
    {SegmentState.LAUNCHING, SegmentState.RUNNING, SegmentState.CANCELLING}
)
FINISHED_JOB_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


def job_transition_allowed(source: JobState, target: JobState) -> bool:
    return target in JOB_TRANSITIONS[source]


def segment_transition_allowed(source: SegmentState, target: SegmentState) -> bool:
    return target in SEGMENT_TRANSITIONS[source]


class ActionConflict(Exception):
    """A user action that the job's current state does not allow (HTTP 409)."""


class UserAction(enum.StrEnum):
    CANCEL = "cancel"
    PAUSE = "pause"
    RESUME = "resume"


@dataclass(frozen=True)
class JobView:
    """The parts of a job the rules look at."""

    state: JobState
    steps_done: int
    total_steps: int
    failures: int
    max_failures: int
    pause_requested: bool = False
    rollback_on_divergence: bool = False
    rollbacks: int = 0  # times the job already resumed from its last good checkpoint


class Keep(enum.Enum):
    """A JobChanges column left as it is (None is a value: it clears the column)."""

    KEEP = "keep"


KEEP = Keep.KEEP


@dataclass(frozen=True)
class JobChanges:
    """The job columns a state change sets besides the state; KEEP leaves a column as it is."""

    steps_done: int | Keep = KEEP
    failures: int | Keep = KEEP
    pause_requested: bool | Keep = KEEP
    reason: str | Keep | None = KEEP  # why the job failed, shown to the user
    wait_until: datetime | Keep | None = KEEP  # the quota refresh a waiting job waits for
    queue_reason: str | Keep | None = KEEP
    next_attempt_at: datetime | Keep | None = KEEP

    def values(self) -> dict[str, Any]:
        """The columns to write, by name."""
        found = {column.name: getattr(self, column.name) for column in fields(self)}
        return {name: value for name, value in found.items() if value is not KEEP}

    def __or__(self, other: JobChanges) -> JobChanges:
        """These changes with `other`'s set columns written over them."""
        return replace(self, **other.values())


NO_CHANGES = JobChanges()


@dataclass(frozen=True)
class Decision:
    """The next state (None: stay) and the job columns to set with it.

    Side effects are not returned: the engine derives them from the state it finds (a cancelled job
    with an active segment gets that segment cancelled), so a lost wake-up costs one tick.
    """

    to_state: JobState | None
    changes: JobChanges = field(default_factory=JobChanges)
    event: str = ""
    message: str | None = None


def decide_user_action(job: JobView, action: UserAction) -> Decision:
    if action is UserAction.CANCEL:
        return _cancel(job)
    if action is UserAction.PAUSE:
        return _pause(job)
    return _resume(job)


def _cancel(job: JobView) -> Decision:
    if job.state in FINISHED_JOB_STATES:
        raise ActionConflict(f"job is {job.state}; only unfinished jobs can be cancelled")
    return Decision(JobState.CANCELLED, JobChanges(pause_requested=False), "cancelled")


def _pause(job: JobView) -> Decision:
    if job.state in (JobState.QUEUED, JobState.WAITING):
        return Decision(JobState.PAUSED, event="paused")
    if job.state is JobState.RUNNING and not job.pause_requested:
        # The running segment commits a checkpoint early; the job pauses when it has ended.
        return Decision(None, JobChanges(pause_requested=True), "pause_requested")
    raise ActionConflict(
        f"job is {job.state}" + (" (pause already requested)" * job.pause_requested)
    )


def _resume(job: JobView) -> Decision:
    if job.state is JobState.PAUSED:
        return Decision(JobState.QUEUED, event="resumed")
    if job.state is JobState.FAILED:
        return Decision(JobState.QUEUED, JobChanges(failures=0, reason=None), event="resumed")
    if job.state is JobState.RUNNING and job.pause_requested:
        return Decision(None, JobChanges(pause_requested=False), event="pause_withdrawn")
    raise ActionConflict(f"job is {job.state}; only paused or failed jobs can be resumed")


@dataclass(frozen=True)
class SegmentEnd:
    """What the engine observed when a segment's session ended."""

    committed: bool
    end_step: int | None
    reason: str
    progressed: bool = True  # committed at least one step beyond where it started
    diverged: bool = False  # the loss went non-finite; nothing was committed


def decide_segment_end(job: JobView, end: SegmentEnd) -> Decision:
    """A segment ended: finish, chain the next one, pause, or count a failure."""
    if job.state is not JobState.RUNNING:
        # Cancelled meanwhile: record the segment, leave the job as the user set it.
        return Decision(None, event="segment_ended_after_cancel", message=end.reason)
    if end.diverged:
        return _diverged(job, end.reason)
    if end.committed and end.end_step is not None:
        done = end.end_step >= job.total_steps
        changes = JobChanges(steps_done=end.end_step, failures=0)
        if done:
            return Decision(JobState.SUCCEEDED, changes, event="succeeded")
        if not end.progressed and not job.pause_requested:
            # A session too short for start-up, one step and a save would chain forever.
            return _count_failure(job, "the segment committed no new step", changes)
        return _next_or_pause(job, changes, "segment_committed", end.reason)
    return _count_failure(job, end.reason)


def _diverged(job: JobView, reason: str) -> Decision:
    """Retrying the same data order diverges again: fail at once, or roll back once."""
    if job.rollback_on_divergence and job.rollbacks == 0:
        message = f"{reason}; resuming from it once with a different data-order seed"
        return _next_or_pause(job, JobChanges(), "rolled_back", message)
    changes = JobChanges(reason=reason, pause_requested=False)
    return Decision(JobState.FAILED, changes, event="diverged", message=reason)


def decide_unlaunchable(reason: str) -> Decision:
    """The planner will not launch this job's next session as specified (a queued job): no
    retry would change that, so the job fails with the reason."""
    changes = JobChanges(reason=reason, pause_requested=False)
    return Decision(JobState.FAILED, changes, event="failed", message=reason)


def decide_launch_failure(job: JobView, reason: str, final: bool = False) -> Decision:
    """A launch the backend refused for good (not a transient error). `final`: the account
    itself may not run it, so no retry can help: the job fails now, not after max_failures."""
    if final:
        changes = JobChanges(failures=job.failures + 1, reason=reason, pause_requested=False)
        return Decision(JobState.FAILED, changes, event="failed", message=reason)
    return _count_failure(job, reason)


def _count_failure(job: JobView, reason: str, changes: JobChanges = NO_CHANGES) -> Decision:
    failures = job.failures + 1
    changes = replace(changes, failures=failures)
    if failures > job.max_failures:
        message = f"{failures} consecutive failed segments; last: {reason}"
        changes = replace(changes, reason=message, pause_requested=False)
        return Decision(JobState.FAILED, changes, event="failed", message=message)
    return _next_or_pause(job, changes, "segment_failed", reason)


def _next_or_pause(job: JobView, changes: JobChanges, event: str, message: str) -> Decision:
    if job.pause_requested:
        paused = replace(changes, pause_requested=False)
        return Decision(JobState.PAUSED, paused, event, message)
    return Decision(JobState.QUEUED, changes, event, message)


def decide_quota(job: JobView, refresh_at: datetime | None, now: datetime) -> Decision | None:
    """Park a queued job until the quota refreshes, or wake a waiting one; None: nothing to do."""
    if job.state is JobState.QUEUED and refresh_at is not None and refresh_at > now:
        return Decision(
            JobState.WAITING,
            JobChanges(wait_until=refresh_at),
            event="quota_exhausted",
            message=f"quota spent; resumes after {refresh_at.isoformat()}",
        )
    if job.state is JobState.WAITING and (refresh_at is None or refresh_at <= now):
        return Decision(JobState.QUEUED, JobChanges(wait_until=None), event="quota_refreshed")
    return None
