"""Watching a running session, collecting what it left, and deciding what follows."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta
from typing import Any

from sqlalchemy import select, update

from orchestrator.backends.base import Backend, Collected, Gone, Rejected, SessionStatus
from orchestrator.engine.context import Context
from orchestrator.engine.decisions import apply_decision, job_view
from orchestrator.engine.revisit import Next
from orchestrator.engine.rollbacks import count_rollbacks
from orchestrator.engine.text import clip
from orchestrator.lifecycle import JobState, SegmentEnd, SegmentState, decide_segment_end
from orchestrator.models import Event, Job, Segment
from orchestrator.session_timings import SessionTimings
from orchestrator.spec import stored_spec
from orchestrator.transitions import record_event, set_segment_state
from orchestrator.webhooks import STALLED_EVENT
from worker.boundary.contract import CheckpointRef, Outcome, SegmentSpec
from worker.boundary.heartbeat import Heartbeat

log = logging.getLogger(__name__)
ENDED = (SessionStatus.FINISHED, SessionStatus.LOST)


def watch(ctx: Context, job: Job, segment: Segment, backend: Backend) -> Next:
    assert segment.handle is not None
    if job.pause_requested and not segment.stop_requested:
        backend.request_stop(segment.handle)
        with ctx.db.transaction() as session:
            session.execute(
                update(Segment).where(Segment.id == segment.id).values(stop_requested=True)
            )
            record_event(
                session, job.id, "stop_requested", segment_index=segment.index, at=ctx.clock()
            )
    status = session_status(backend, segment.handle)
    if status not in ENDED:
        if overran(ctx, segment, backend):
            return _kill_overrun(ctx, job, segment, backend)
        _record_progress(ctx, segment, backend)
        _note_backend_queue(ctx, job, segment, status, backend)
        return Next(backend.poll_seconds)
    try:
        collected = backend.collect(segment.handle, ctx.store.path(job.id, segment.index))
    except (Rejected, Gone) as exc:
        collected = Collected(None, None, None, None, f"the session's output is unusable: {exc}")
    finish(ctx, job, segment, collected)
    return Next(None, again=True)


def session_status(backend: Backend, handle: str) -> SessionStatus:
    try:
        return backend.status(handle)
    except Gone:
        return SessionStatus.LOST


def overran(ctx: Context, segment: Segment, backend: Backend) -> bool:
    """The orchestrator's own backstop to the backend's hard limit."""
    if backend.overrun_slack_seconds is None or segment.launched_at is None:
        return False
    limit = timedelta(seconds=segment.limit_seconds + backend.overrun_slack_seconds)
    return ctx.clock() > segment.launched_at + limit


def _kill_overrun(ctx: Context, job: Job, segment: Segment, backend: Backend) -> Next:
    assert segment.handle is not None
    reason = "the session ran past its hard limit and was killed by the orchestrator"
    backend.cancel(segment.handle)
    finish(ctx, job, segment, Collected(None, None, None, None, reason))
    return Next(None, again=True)


def _record_progress(ctx: Context, segment: Segment, backend: Backend) -> None:
    assert segment.handle is not None
    beat = backend.progress(segment.handle)
    if beat is None:
        return
    if beat == Heartbeat.from_json(segment.progress):
        _note_stalled(ctx, segment, beat)
        return
    with ctx.db.transaction() as session:
        session.execute(
            update(Segment).where(Segment.id == segment.id).values(progress=beat.to_json())
        )


def _note_backend_queue(
    ctx: Context, job: Job, segment: Segment, status: SessionStatus, backend: Backend
) -> None:
    """A launched session still waiting in the backend's own queue (Slurm's pending reason)
    shows as the job's queue reason until it starts."""
    assert segment.handle is not None
    waiting = backend.queue_reason(segment.handle) if status is SessionStatus.QUEUED else None
    reason = clip(f"waiting in the queue: {waiting}") if waiting else None
    if reason == job.queue_reason:
        return
    with ctx.db.transaction() as session:
        session.execute(update(Job).where(Job.id == job.id).values(queue_reason=reason))
    job.queue_reason = reason


def _note_stalled(ctx: Context, segment: Segment, beat: Heartbeat) -> None:
    """One `stalled` event (a webhook) when the heartbeat is older than the hang bound."""
    now = ctx.clock()
    if not beat.stalled(SegmentSpec.from_dict(segment.launch_spec).watchdog, now):
        return
    with ctx.db.transaction() as session:
        noted = session.scalar(
            select(Event.id).where(
                Event.job_id == segment.job_id,
                Event.segment_index == segment.index,
                Event.kind == STALLED_EVENT,
            )
        )
        if noted is None:
            message = f"no heartbeat for {beat.age(now):.0f} s (step {beat.step})"
            record_event(
                session,
                segment.job_id,
                STALLED_EVENT,
                segment_index=segment.index,
                message=message,
                at=ctx.clock(),
            )


def finish(ctx: Context, job: Job, segment: Segment, collected: Collected) -> None:
    result = collected.result
    committed = collected.manifest is not None and collected.checkpoint is not None
    reason = clip(collected.problem or (result.outcome if result else "no result")) or ""
    fields: dict[str, Any] = {"ended_at": ctx.clock(), "error": clip(collected.problem)}
    if result is not None:
        measured = SessionTimings.measured(
            result.timings, collected.session_seconds, result.step_time_ema
        )
        timings = replace(
            measured,
            transport=collected.transport,
            link_bytes=collected.link_bytes,
            checkpoint_bytes=collected.manifest.total_bytes if collected.manifest else None,
            install_from=result.requirements,
        ).to_json()
        fields |= {"outcome": result.outcome, "timings": timings, "metrics": result.metrics}
    if committed:
        assert result is not None
        fields["end_step"] = result.end_step
    elif result is None:
        fields["outcome"] = "lost"
    with ctx.db.transaction() as session:
        fresh = session.get(Job, job.id)
        assert fresh is not None
        target = SegmentState.SUCCEEDED if committed else SegmentState.FAILED
        set_segment_state(session, segment, target, message=reason, **fields, now=ctx.clock())
        if committed:
            assert collected.manifest is not None
            assert result is not None
            ctx.store.record(session, job.id, segment.index, result.end_step, collected.manifest)
        end = SegmentEnd(
            committed,
            result.end_step if committed and result else None,
            reason,
            progressed=bool(committed and result and result.end_step > segment.start_step),
            diverged=result is not None and result.outcome == Outcome.DIVERGED,
        )
        decision = decide_segment_end(job_view(fresh, count_rollbacks(session, job.id)), end)
        if decision.to_state is not None or decision.changes.values():
            apply_decision(session, fresh, decision, now=ctx.clock())
        _wake_queued(session, segment.slot_key)
    if committed:
        # A finished job keeps only its newest `keep_when_done` (default: its final checkpoint).
        done = decision.to_state is JobState.SUCCEEDED
        ctx.store.prune(job.id, stored_spec(job.spec).keep_when_done if done else None)
        ctx.trackers.sync(job.id, finished=done)
    elif result is not None and result.outcome == Outcome.REJECTED:
        _check_resume_checkpoint(ctx, job, segment, fields["error"] or reason)


def _wake_queued(session: Any, slot_key: str | None) -> None:
    """A slot came free: queued jobs waiting for it are due now, not at their next poll."""
    if slot_key is None:
        return
    session.execute(
        update(Job)
        .where(Job.slot_key == slot_key, Job.state == JobState.QUEUED.value)
        .values(next_attempt_at=None)
        .execution_options(synchronize_session=False)
    )


def _check_resume_checkpoint(ctx: Context, job: Job, segment: Segment, error: str) -> None:
    """The session refused its resume checkpoint. If the stored copy is corrupt, or the session
    before refused the same checkpoint with the same error (a deterministic refusal, not a
    passing stale read), never offer it again: the next segment falls back to the newest older
    checkpoint that verifies, instead of burning the retries on it."""
    expect = SegmentSpec.from_dict(segment.launch_spec).expect
    if expect is None:
        return
    problem = ctx.store.verify(job.id, expect.segment_index, expect.step)
    if problem is None and _refused_before(ctx, segment, expect, error):
        problem = f"two sessions in a row refused it: {error}"
    if problem is not None:
        ctx.store.reject(job.id, expect.segment_index, problem)


def _refused_before(ctx: Context, segment: Segment, expect: CheckpointRef, error: str) -> bool:
    with ctx.db.transaction() as session:
        previous = session.scalars(
            select(Segment).where(
                Segment.job_id == segment.job_id, Segment.index == segment.index - 1
            )
        ).first()
    return (
        previous is not None
        and previous.outcome == Outcome.REJECTED
        and SegmentSpec.from_dict(previous.launch_spec).expect == expect
        and (previous.error or previous.outcome) == error
    )
