"""Cancelling a segment whose job was cancelled (or failed): it always reaches an end state.

A session the backend confirms it is stopping is `cancelled`. One the backend cannot stop (Kaggle
exposes no session id) is `cancelling`: it keeps its slot until it is seen to end, and the user is
told it may still run. One Baton can no longer reach at all is `abandoned`, with an event saying
what may still run and where.
"""

from __future__ import annotations

from typing import Any

from orchestrator.backends.base import Backend
from orchestrator.engine.context import Context
from orchestrator.engine.revisit import Next
from orchestrator.engine.watch import ENDED, session_status
from orchestrator.lifecycle import SegmentState
from orchestrator.models import Job, Segment
from orchestrator.transitions import set_segment_state


def cancel(ctx: Context, job: Job, segment: Segment, backend: Backend) -> Next:
    handle = segment.handle
    if segment.state == SegmentState.LAUNCHING and handle is None:
        handle = backend.find(segment.launch_id)
        if handle is None:
            _end(ctx, segment, SegmentState.CANCELLED, "cancelled before it started")
            return Next(None)
        # The push went through but its answer was lost: adopt the session (as a launch would),
        # so that it is stopped, or keeps its slot as `cancelling` until it is seen to end.
        _adopt(ctx, segment, handle)
    assert handle is not None
    if segment.state == SegmentState.CANCELLING:
        if session_status(backend, handle) in ENDED:
            _end(ctx, segment, SegmentState.CANCELLED, "the session has ended")
            return Next(None)
        return Next(backend.poll_seconds)
    if backend.cancel(handle):
        _end(ctx, segment, SegmentState.CANCELLED, f"job {job.state}", handle=handle)
        return Next(None)
    _end(
        ctx,
        segment,
        SegmentState.CANCELLING,
        f"the {backend.name} session cannot be stopped from here: it was asked to stop through "
        "its control channel where it has one (a Kaggle kernel with internet and the "
        "BATON_KAGGLE_KEY Secret), and otherwise may keep running until it ends on its own; "
        "its slot stays counted until it is seen to end",
        handle=handle,
    )
    return Next(backend.poll_seconds)


def _adopt(ctx: Context, segment: Segment, handle: str) -> None:
    with ctx.db.transaction() as session:
        set_segment_state(
            session,
            segment,
            SegmentState.RUNNING,
            message="found under its launch id after the launch's answer was lost",
            handle=handle,
            launched_at=ctx.clock(),
            now=ctx.clock(),
        )
    segment.state, segment.handle = SegmentState.RUNNING.value, handle


def abandon(ctx: Context, segment: Segment, why: str) -> None:
    """Baton cannot reach the session any more; say what may still run."""
    message = (
        f"{why}; segment {segment.index} ({segment.launch_id}) may still be running on its "
        f"backend until its {segment.limit_seconds:.0f} s limit"
    )
    _end(ctx, segment, SegmentState.ABANDONED, message)


def _end(
    ctx: Context, segment: Segment, target: SegmentState, message: str, handle: str | None = None
) -> None:
    fields: dict[str, Any] = {}
    if target is not SegmentState.CANCELLING:
        fields["ended_at"] = ctx.clock()
    if handle is not None and handle != segment.handle:
        fields["handle"] = handle
    with ctx.db.transaction() as session:
        set_segment_state(session, segment, target, message=message, **fields, now=ctx.clock())
