"""Launching: admit a queued job, record the intent to launch, then launch exactly once.

The intent (a `launching` segment with its launch id) is committed before the backend is called,
and the backend is asked what already runs under that id before anything is pushed, so a crash
at any moment never launches one segment twice.
"""

from __future__ import annotations

import logging
from dataclasses import asdict

from pydantic import ValidationError
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from orchestrator.backends.base import (
    AccountRefused,
    Backend,
    Gone,
    LaunchRequest,
    Quota,
    Rejected,
)
from orchestrator.engine.admission import admit, serialize_admissions
from orchestrator.engine.checkpoints import NoUsableCheckpoint
from orchestrator.engine.claim import Claim
from orchestrator.engine.context import Context
from orchestrator.engine.decisions import apply_decision, job_view
from orchestrator.engine.move import moved_spec, switch_backend
from orchestrator.engine.revisit import Next
from orchestrator.engine.rollbacks import count_rollbacks
from orchestrator.engine.text import clip
from orchestrator.lifecycle import (
    JobChanges,
    JobState,
    SegmentState,
    decide_launch_failure,
    decide_quota,
    decide_unlaunchable,
)
from orchestrator.models import Job, Segment
from orchestrator.planner import (
    build_segment_spec,
    minimum_session_seconds,
    plan_next_segment,
    too_short_for_startup,
)
from orchestrator.session_timings import SessionTimings
from orchestrator.spec import stored_spec
from orchestrator.transitions import StaleState, record_event, set_job_state, set_segment_state
from worker.boundary.contract import CheckpointRef, SegmentSpec
from worker.boundary.launch_id import LaunchId
from worker.boundary.planning import PastSegment

log = logging.getLogger(__name__)


def admit_and_launch(ctx: Context, job: Job, backend: Backend, claim: Claim) -> Next:
    """A queued job with no active segment: wait for quota or a slot, or launch the next one."""
    quota = backend.quota()
    try:
        resume = ctx.store.resume_point(job.id)
    except NoUsableCheckpoint as exc:
        return _cannot_resume(ctx, job, exc)
    slot = backend.slot
    with ctx.db.transaction() as session:
        # The first statement writes, so SQLite's one writer lock is ours from here on.
        claimed = session.execute(
            update(Job)
            .where(Job.id == job.id, Job.state == JobState.QUEUED.value)
            .values(slot_key=slot.key)
            .execution_options(synchronize_session=False)
        )
        if claimed.rowcount != 1:  # type: ignore[attr-defined]
            raise StaleState(f"job {job.id} is no longer queued")
        serialize_admissions(session, slot.key)
        history = _history(session, job.id)
        too_short = too_short_for_startup(stored_spec(job.spec).session.limit_seconds, history)
        if too_short is not None:
            apply_decision(session, job, decide_unlaunchable(too_short), now=ctx.clock())
            return Next(None)
        segment = None
        if quota is not None and quota.seconds_left < minimum_session_seconds(history):
            if not _continues_locally(ctx, job):
                return _wait_for_quota(ctx, session, job, quota)
        else:
            admission = admit(session, job.id, slot)
            if not admission.admitted:
                _note_queued(session, job, admission.reason)
                return Next(backend.poll_seconds)
            segment = _record_intent(ctx, session, job, quota, history, resume, slot.key)
    if segment is None:
        assert quota is not None
        return _move_to_local(ctx, job, backend, quota)
    return launch(ctx, job, segment, backend, claim)


def launch(ctx: Context, job: Job, segment: Segment, backend: Backend, claim: Claim) -> Next:
    """Launch a `launching` segment, or adopt the session a crashed launch already started."""
    try:
        handle = backend.find(segment.launch_id)
        if handle is None:
            if not claim.held():
                raise StaleState(f"lost the claim on {job.id} before launching")
            handle = backend.launch(_request(ctx, segment))
    except (Rejected, Gone) as exc:
        log.warning("launch of %s refused: %s", segment.launch_id, exc)
        final = isinstance(exc, AccountRefused)
        _fail_launch(ctx, job, segment, f"launch refused: {exc}", final=final)
        return Next(None, again=True)
    # A StaleState here means another holder took over (our lease expired): it adopts this
    # session through find(launch_id). The session is never cancelled by a side that lost.
    with ctx.db.transaction() as session:
        set_segment_state(
            session,
            segment,
            SegmentState.RUNNING,
            handle=handle,
            launched_at=ctx.clock(),
            now=ctx.clock(),
        )
    return Next(backend.poll_seconds)


def _request(ctx: Context, segment: Segment) -> LaunchRequest:
    spec = SegmentSpec.from_dict(segment.launch_spec)
    resume_from = None
    if spec.expect is not None:
        resume_from = ctx.store.path(spec.job_id, spec.expect.segment_index)
    return LaunchRequest(segment.launch_id, spec, resume_from)


def _cannot_resume(ctx: Context, job: Job, exc: NoUsableCheckpoint) -> Next:
    with ctx.db.transaction() as session:
        reason = f"cannot resume: {exc}"
        set_job_state(
            session,
            job.id,
            JobState.QUEUED,
            JobState.FAILED,
            event="failed",
            message=reason,
            changes=JobChanges(reason=reason),
            now=ctx.clock(),
        )
    return Next(None)


def _continues_locally(ctx: Context, job: Job) -> bool:
    """The job asks to continue on the local backend when its Kaggle quota is spent, and the
    operator allows it (BATON_ALLOW_LOCAL_FALLBACK)."""
    kaggle = stored_spec(job.spec).kaggle
    if not ctx.allow_local_fallback or kaggle is None or kaggle.on_quota_exhausted != "local":
        return False
    try:
        moved_spec(job.spec, "local", None)
    except ValidationError as exc:
        log.warning("job %s waits for the quota: the local backend refuses it (%s)", job.id, exc)
        return False
    return True


def _move_to_local(ctx: Context, job: Job, backend: Backend, quota: Quota) -> Next:
    """Instead of parking the job until Kaggle's refresh: move it to the local backend, its
    newest verified checkpoint fetched here first where it stayed on Kaggle (a stub); the next
    phase launches it locally."""
    try:
        resume = ctx.store.held_resume_point(job.id, backend.fetch_checkpoint)
    except NoUsableCheckpoint as exc:
        return _cannot_resume(ctx, job, exc)
    until = f" until {quota.refresh_at:%Y-%m-%d %H:%M} UTC" if quota.refresh_at else ""
    why = (
        f": its Kaggle quota is spent{until} ({quota.seconds_left:.0f} s left) and "
        "kaggle.on_quota_exhausted is local"
    )
    with ctx.db.transaction() as session:
        fresh = session.get(Job, job.id)
        if fresh is None or fresh.state != JobState.QUEUED.value or fresh.backend != job.backend:
            raise StaleState(f"job {job.id} changed while its checkpoint was fetched")
        switch_backend(session, fresh, moved_spec(fresh.spec, "local", None), resume, why)
    return Next(None, again=True)


def _wait_for_quota(ctx: Context, session: Session, job: Job, quota: Quota) -> Next:
    now = ctx.clock()
    decision = decide_quota(job_view(job), quota.refresh_at, now)
    if decision is not None:
        apply_decision(session, job, decision, now=now)
    if quota.refresh_at is None:
        return Next(None)
    return Next(max(0.0, (quota.refresh_at - now).total_seconds()))


def _note_queued(session: Session, job: Job, reason: str | None) -> None:
    """Show why the job waits; one event when it starts waiting, not one per look."""
    if job.queue_reason is None:
        record_event(session, job.id, "queued_for_slot", message=reason)
    session.execute(
        update(Job)
        .where(Job.id == job.id)
        .values(queue_reason=reason)
        .execution_options(synchronize_session=False)
    )


def _record_intent(
    ctx: Context,
    session: Session,
    job: Job,
    quota: Quota | None,
    history: list[PastSegment],
    resume: CheckpointRef | None,
    slot_key: str,
) -> Segment:
    spec = stored_spec(job.spec)
    next_index = session.scalar(select(func.count(Segment.id)).where(Segment.job_id == job.id))
    plan = plan_next_segment(
        spec,
        int(next_index or 0),
        resume,
        history,
        quota.seconds_left if quota is not None else None,
        count_rollbacks(session, job.id),
    )
    segment = Segment(
        job_id=job.id,
        index=plan.index,
        state=SegmentState.LAUNCHING.value,
        launch_id=str(LaunchId(job.id, plan.index)),
        slot_key=slot_key,
        start_step=plan.start_step,
        limit_seconds=plan.limit_seconds,
        launch_spec=asdict(build_segment_spec(job.id, spec, plan)),
    )
    session.add(segment)
    session.flush()
    set_job_state(
        session,
        job.id,
        JobState.QUEUED,
        JobState.RUNNING,
        event="segment_planned",
        message=f"segment {plan.index} from step {plan.start_step}",
        changes=JobChanges(queue_reason=None),
        now=ctx.clock(),
    )
    return segment


def _history(session: Session, job_id: str) -> list[PastSegment]:
    """Measured costs of the job's committed segments, oldest first."""
    done = session.scalars(
        select(Segment)
        .where(Segment.job_id == job_id, Segment.state == SegmentState.SUCCEEDED.value)
        .order_by(Segment.index)
    )
    return [past_segment(segment) for segment in done if segment.timings]


def past_segment(segment: Segment) -> PastSegment:
    timings = SessionTimings.from_json(segment.timings) or SessionTimings()
    return PastSegment(
        save_seconds=timings.save or 0.0,
        upload_seconds=timings.upload or 0.0,
        worker_seconds=timings.total or 0.0,
        session_seconds=timings.session,
        step_seconds=timings.step_ema,
        setup_seconds=timings.setup,
        checkpoint_bytes=timings.checkpoint_bytes,
        end_step=segment.end_step,
    )


def _fail_launch(
    ctx: Context, job: Job, segment: Segment, reason: str, final: bool = False
) -> None:
    reason = clip(reason) or reason
    with ctx.db.transaction() as session:
        fresh = session.get(Job, job.id)
        assert fresh is not None
        set_segment_state(
            session,
            segment,
            SegmentState.FAILED,
            message=reason,
            error=reason,
            ended_at=ctx.clock(),
            now=ctx.clock(),
        )
        if fresh.state == JobState.RUNNING:
            decision = decide_launch_failure(job_view(fresh), reason, final=final)
            apply_decision(session, fresh, decision, now=ctx.clock())
