"""The engine: applies user actions and reconciles jobs against their backends.

Every way of running Baton calls these functions: today the embedded loop in `baton serve`; at
scale, thin Celery tasks would call the same ones. Every reconcile re-reads the database, so
running one twice, or late, is harmless. Backend calls happen outside database transactions; the
intent to launch is committed before the launch, and the backend is asked what runs before
anything is pushed again.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from orchestrator.backends.base import (
    Backend,
    Collected,
    LaunchRequest,
    Quota,
    Rejected,
    SessionStatus,
    Transient,
)
from orchestrator.backends.registry import BackendResolver
from orchestrator.db import Database
from orchestrator.lifecycle import (
    ACTIVE_SEGMENT_STATES,
    FINISHED_JOB_STATES,
    Decision,
    JobState,
    JobView,
    SegmentEnd,
    SegmentState,
    UserAction,
    decide_launch_failure,
    decide_quota,
    decide_segment_end,
    decide_user_action,
)
from orchestrator.models import Checkpoint, Job, Segment, utcnow
from orchestrator.planner import (
    CheckpointRef,
    PastSegment,
    build_segment_spec,
    minimum_session_seconds,
    plan_next_segment,
)
from orchestrator.spec import JobSpec, KaggleSpec, spec_warnings
from orchestrator.transitions import StaleState, record_event, set_job_state, set_segment_state
from worker.contract import SegmentSpec

log = logging.getLogger(__name__)

_RECONCILED_STATES = (JobState.QUEUED, JobState.RUNNING, JobState.WAITING)
GPU_SESSIONS_PER_ACCOUNT = 2


class JobNotFound(Exception):
    pass


def job_view(job: Job) -> JobView:
    return JobView(
        state=JobState(job.state),
        steps_done=job.steps_done,
        total_steps=job.total_steps,
        failures=job.failures,
        max_failures=int(job.spec["retry"]["max_failures"]),
        pause_requested=job.pause_requested,
    )


def apply_decision(session: Session, job: Job, decision: Decision) -> None:
    set_job_state(
        session,
        job.id,
        JobState(job.state),
        decision.to_state,
        event=decision.event,
        message=decision.message,
        **decision.fields,
    )


def active_segment(session: Session, job_id: str) -> Segment | None:
    return session.scalars(
        select(Segment).where(
            Segment.job_id == job_id,
            Segment.state.in_([state.value for state in ACTIVE_SEGMENT_STATES]),
        )
    ).first()


@dataclass
class Engine:
    db: Database
    backends: BackendResolver
    checkpoints_dir: Path
    clock: Callable[[], datetime] = utcnow
    # Committed checkpoints kept on disk per job; older ones keep their row, not their files.
    keep_checkpoints: int = 2

    # --- user-facing actions -------------------------------------------------------------

    def submit(self, user_id: str, spec: JobSpec) -> Job:
        job = Job(
            id=f"j{uuid.uuid4().hex[:12]}",
            user_id=user_id,
            name=spec.name,
            backend=spec.backend,
            state=JobState.QUEUED.value,
            spec=spec.model_dump(mode="json"),
            total_steps=spec.total_steps,
        )
        with self.db.transaction() as session:
            session.add(job)
            session.flush()
            record_event(session, job.id, "submitted", to_state=JobState.QUEUED.value)
            for warning in spec_warnings(job.spec):
                record_event(session, job.id, "warning", message=warning)
        return job

    def act(self, user_id: str, job_id: str, action: UserAction) -> Job:
        """Cancel, pause or resume; raises ActionConflict when the state forbids it."""
        with self.db.transaction() as session:
            job = session.get(Job, job_id)
            if job is None or job.user_id != user_id:
                raise JobNotFound(job_id)
            apply_decision(session, job, decide_user_action(job_view(job), action))
        with self.db.transaction() as session:
            fresh = session.get(Job, job_id)
            assert fresh is not None
            return fresh

    # --- reconciliation ------------------------------------------------------------------

    def jobs_to_reconcile(self) -> list[str]:
        with self.db.transaction() as session:
            states = [state.value for state in _RECONCILED_STATES]
            busy = select(Segment.job_id).where(
                Segment.state.in_([state.value for state in ACTIVE_SEGMENT_STATES])
            )
            query = select(Job.id).where(Job.state.in_(states) | Job.id.in_(busy))
            return list(session.scalars(query.order_by(Job.created_at)))

    def reconcile_all(self) -> None:
        for job_id in self.jobs_to_reconcile():
            try:
                self.reconcile_job(job_id)
            except StaleState as exc:
                log.info("job %s moved while reconciling (%s); next tick re-reads", job_id, exc)
            except Exception:  # one job's broken backend must not stall every other job
                log.exception("reconciling job %s failed; next tick retries", job_id)

    def reconcile_job(self, job_id: str) -> None:
        with self.db.transaction() as session:
            job = session.get(Job, job_id)
            if job is None:
                return
            segment = active_segment(session, job_id)
        if segment is not None:
            self._drive_segment(job, segment)
        elif job.state == JobState.QUEUED:
            self._launch_next(job)
        elif job.state == JobState.WAITING:
            self._wake_if_quota_refreshed(job)

    def _backend(self, job: Job) -> Backend:
        return self.backends.for_job(job)

    def _wake_if_quota_refreshed(self, job: Job) -> None:
        refresh_at = job.wait_until
        if refresh_at is not None and refresh_at.tzinfo is None:
            refresh_at = refresh_at.replace(tzinfo=self.clock().tzinfo)
        decision = decide_quota(job_view(job), refresh_at, self.clock())
        if decision is not None:
            with self.db.transaction() as session:
                apply_decision(session, job, decision)

    def _launch_next(self, job: Job) -> None:
        # The stored spec was validated on submit; a job waiting for a GPU slot is checked on
        # every tick, so this look needs no full validation (which reads the trainer's source).
        kaggle = job.spec.get("kaggle")
        if kaggle is not None and KaggleSpec.model_validate(kaggle).uses_gpu:
            with self.db.transaction() as session:
                if self._busy_gpu_sessions(session, job.user_id) >= GPU_SESSIONS_PER_ACCOUNT:
                    return  # Kaggle runs at most 2 batch GPU sessions per account
        try:
            quota = self._backend(job).quota()
        except Transient as exc:
            log.warning("quota of job %s unknown for now: %s", job.id, exc)
            return
        except Rejected as exc:
            with self.db.transaction() as session:
                set_job_state(
                    session,
                    job.id,
                    JobState.QUEUED,
                    JobState.FAILED,
                    event="failed",
                    message=str(exc),
                    reason=str(exc),
                )
            return
        with self.db.transaction() as session:
            history = self._history(session, job.id)
            if quota is not None and quota.seconds_left < minimum_session_seconds(history):
                decision = decide_quota(job_view(job), quota.refresh_at, self.clock())
                if decision is not None:
                    apply_decision(session, job, decision)
                return
            spec = JobSpec.model_validate(job.spec)
            segment = self._record_launch_intent(session, job, spec, quota, history)
        self._drive_segment(job, segment)

    def _history(self, session: Session, job_id: str) -> list[PastSegment]:
        """Measured costs of the job's committed segments, oldest first."""
        done = session.scalars(
            select(Segment)
            .where(Segment.job_id == job_id, Segment.state == SegmentState.SUCCEEDED.value)
            .order_by(Segment.index)
        )
        return [_past(segment) for segment in done if segment.timings]

    def _busy_gpu_sessions(self, session: Session, user_id: str) -> int:
        specs = session.scalars(
            select(Job.spec)
            .join(Segment, Segment.job_id == Job.id)
            .where(
                Job.user_id == user_id,
                Job.backend == "kaggle",
                Segment.state.in_([state.value for state in ACTIVE_SEGMENT_STATES]),
            )
        )
        return sum(1 for spec in specs if KaggleSpec.model_validate(spec["kaggle"]).uses_gpu)

    def _record_launch_intent(
        self,
        session: Session,
        job: Job,
        spec: JobSpec,
        quota: Quota | None,
        history: list[PastSegment],
    ) -> Segment:
        latest = session.scalars(
            select(Checkpoint)
            .where(Checkpoint.job_id == job.id)
            .order_by(Checkpoint.step.desc(), Checkpoint.segment_index.desc())
        ).first()
        next_index = len(session.scalars(select(Segment.id).where(Segment.job_id == job.id)).all())
        plan = plan_next_segment(
            spec,
            next_index,
            CheckpointRef(latest.segment_index, latest.step) if latest else None,
            history,
            quota.seconds_left if quota is not None else None,
        )
        segment_spec = build_segment_spec(job.id, spec, plan)
        segment = Segment(
            job_id=job.id,
            index=plan.index,
            state=SegmentState.LAUNCHING.value,
            launch_id=f"{job.id}-{plan.index:04d}",
            start_step=plan.start_step,
            limit_seconds=plan.limit_seconds,
            launch_spec=asdict(segment_spec),
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
        )
        return segment

    def _drive_segment(self, job: Job, segment: Segment) -> None:
        if JobState(job.state) in FINISHED_JOB_STATES:
            self._cancel_segment(job, segment)
        elif segment.state == SegmentState.LAUNCHING:
            self._launch(job, segment)
        else:
            self._watch(job, segment)

    def _launch(self, job: Job, segment: Segment) -> None:
        backend = self._backend(job)
        try:
            handle = backend.find(segment.launch_id)
            if handle is None:
                handle = backend.launch(self._launch_request(segment))
        except Transient as exc:
            log.warning("launch of %s deferred: %s", segment.launch_id, exc)
            return
        except Exception as exc:  # a refused launch is a failed segment, never a crash loop
            log.warning("launch of %s refused: %s", segment.launch_id, exc)
            self._fail_launch(job, segment, f"launch refused: {exc}")
            return
        try:
            with self.db.transaction() as session:
                set_segment_state(
                    session, segment, SegmentState.RUNNING, handle=handle, launched_at=self.clock()
                )
        except StaleState:
            # Cancelled while the launch was in flight: don't leave the session running.
            backend.cancel(handle)
            raise

    def _launch_request(self, segment: Segment) -> LaunchRequest:
        spec = SegmentSpec.from_dict(segment.launch_spec)
        resume_from = None
        if spec.expect is not None:
            resume_from = self.checkpoint_path(spec.job_id, spec.expect.segment_index)
        return LaunchRequest(segment.launch_id, spec, resume_from)

    def checkpoint_path(self, job_id: str, segment_index: int) -> Path:
        return self.checkpoints_dir / job_id / f"{segment_index:05d}"

    def _fail_launch(self, job: Job, segment: Segment, reason: str) -> None:
        with self.db.transaction() as session:
            fresh = session.get(Job, job.id)
            assert fresh is not None
            set_segment_state(
                session,
                segment,
                SegmentState.FAILED,
                message=reason,
                error=reason,
                ended_at=self.clock(),
            )
            if fresh.state == JobState.RUNNING:
                apply_decision(session, fresh, decide_launch_failure(job_view(fresh), reason))

    def _cancel_segment(self, job: Job, segment: Segment) -> None:
        backend = self._backend(job)
        handle = segment.handle or backend.find(segment.launch_id)
        if handle is not None:
            backend.cancel(handle)
        with self.db.transaction() as session:
            set_segment_state(
                session,
                segment,
                SegmentState.CANCELLED,
                message="job cancelled",
                ended_at=self.clock(),
            )

    def _watch(self, job: Job, segment: Segment) -> None:
        backend = self._backend(job)
        assert segment.handle is not None
        if job.pause_requested and not segment.stop_requested:
            backend.request_stop(segment.handle)
            with self.db.transaction() as session:
                session.execute(
                    update(Segment).where(Segment.id == segment.id).values(stop_requested=True)
                )
                record_event(session, job.id, "stop_requested", segment_index=segment.index)
        try:
            status = backend.status(segment.handle)
            if status in (SessionStatus.QUEUED, SessionStatus.RUNNING):
                return
            collected = backend.collect(segment.handle, self.checkpoint_path(job.id, segment.index))
        except Transient as exc:
            log.warning("status of %s unknown for now: %s", segment.launch_id, exc)
            return
        self._finish(job, segment, collected)
        self.reconcile_job(job.id)  # chain the next segment now, not a tick later

    def _finish(self, job: Job, segment: Segment, collected: Collected) -> None:
        result = collected.result
        committed = collected.manifest is not None and collected.checkpoint is not None
        reason = collected.problem or (result.outcome if result else "no result")
        fields: dict[str, Any] = {"ended_at": self.clock(), "error": collected.problem}
        if result is not None:
            timings = asdict(result.timings)
            timings["session"] = collected.session_seconds
            timings["step_ema"] = result.step_time_ema
            fields |= {"outcome": result.outcome, "timings": timings, "metrics": result.metrics}
        if committed:
            assert result is not None
            fields["end_step"] = result.end_step
        elif result is None:
            fields["outcome"] = "lost"
        with self.db.transaction() as session:
            fresh = session.get(Job, job.id)
            assert fresh is not None
            target = SegmentState.SUCCEEDED if committed else SegmentState.FAILED
            set_segment_state(session, segment, target, message=reason, **fields)
            if committed:
                assert collected.manifest is not None
                assert result is not None
                session.add(
                    Checkpoint(
                        job_id=job.id,
                        segment_index=segment.index,
                        step=result.end_step,
                        location=str(collected.checkpoint),
                        model_digest=collected.manifest.model_digest,
                        bytes=collected.manifest.total_bytes,
                        manifest=collected.manifest.to_dict(),
                    )
                )
            end = SegmentEnd(
                committed,
                result.end_step if committed and result else None,
                reason,
                progressed=bool(committed and result and result.end_step > segment.start_step),
            )
            decision = decide_segment_end(job_view(fresh), end)
            if decision.to_state is not None:
                apply_decision(session, fresh, decision)
        if committed:
            self._prune_checkpoints(job.id)

    def _prune_checkpoints(self, job_id: str) -> None:
        with self.db.transaction() as session:
            older = session.scalars(
                select(Checkpoint.location)
                .where(Checkpoint.job_id == job_id)
                .order_by(Checkpoint.step.desc(), Checkpoint.segment_index.desc())
                .offset(self.keep_checkpoints)
            ).all()
        for location in older:
            shutil.rmtree(location, ignore_errors=True)


def _past(segment: Segment) -> PastSegment:
    timings = segment.timings or {}
    return PastSegment(
        save_seconds=float(timings.get("save", 0.0)),
        upload_seconds=float(timings.get("upload", 0.0)),
        worker_seconds=float(timings.get("total", 0.0)),
        session_seconds=timings.get("session"),
        step_seconds=timings.get("step_ema"),
        setup_seconds=float(timings.get("startup", 0.0)) + float(timings.get("load", 0.0)),
    )
