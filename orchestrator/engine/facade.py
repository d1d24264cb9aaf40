"""The engine's face: user actions, and reconciling one job at a time under its claim.

Every way of running Baton calls these: the embedded loop in `baton serve` and the Celery tasks
alike. `reconcile_job` takes the job's claim, re-reads the database, asks the backend, and does
at most one phase (admit and launch, watch and collect, cancel); running it twice, late or
concurrently is harmless. Errors follow the backend contract: `Transient` backs the job off
(`next_attempt_at`, honouring Retry-After); `Rejected` and `Gone` are handled where they mean
something; anything else is a bug in Baton, which fails the job once with `internal error (…)`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import BindParameter, bindparam, or_, select, update
from sqlalchemy.orm import Session

from orchestrator.backends.base import Backend, Rejected, Transient
from orchestrator.backends.registry import BackendResolver
from orchestrator.db import Database
from orchestrator.engine.backoff import backoff_seconds
from orchestrator.engine.cancel import abandon, cancel
from orchestrator.engine.checkpoints import CheckpointStore, FetchCheckpoint, NoUsableCheckpoint
from orchestrator.engine.claim import DEFAULT_LEASE_SECONDS, Claim, Claims
from orchestrator.engine.context import Context
from orchestrator.engine.decisions import apply_decision, job_view
from orchestrator.engine.idle import park_waiting
from orchestrator.engine.launch import admit_and_launch, launch
from orchestrator.engine.move import moved_spec, switch_backend
from orchestrator.engine.revisit import Next
from orchestrator.engine.segments import active_segment
from orchestrator.engine.text import clip
from orchestrator.engine.watch import watch
from orchestrator.lifecycle import (
    ACTIVE_SEGMENT_STATES,
    FINISHED_JOB_STATES,
    ActionConflict,
    JobChanges,
    JobState,
    SegmentState,
    UserAction,
    decide_quota,
    decide_user_action,
)
from orchestrator.models import Checkpoint, Job, Segment, utcnow
from orchestrator.spec import JobSpec, spec_warnings
from orchestrator.trackers.sync import TrackerSync
from orchestrator.transitions import StaleState, record_event, set_job_state
from worker.boundary.contract import CheckpointRef
from worker.boundary.errors import Pending

log = logging.getLogger(__name__)

_RECONCILED_STATES = (JobState.QUEUED, JobState.RUNNING, JobState.WAITING)
# The jobs due at :now, built once: every reconcile pass asks, and building the statement cost
# about as much as running it.
_NOW: BindParameter[datetime] = bindparam("now")
_DUE = (
    select(Job.id)
    .where(
        Job.state.in_([state.value for state in _RECONCILED_STATES])
        | Job.id.in_(
            select(Segment.job_id).where(
                Segment.state.in_([state.value for state in ACTIVE_SEGMENT_STATES])
            )
        ),
        or_(Job.next_attempt_at.is_(None), Job.next_attempt_at <= _NOW),
        or_(Job.claim_owner.is_(None), Job.claim_expires_at < _NOW),
    )
    .order_by(Job.next_attempt_at.asc().nulls_first(), Job.created_at)
)
# A user action retries its compare-and-set this often when the engine moves the job meanwhile.
_ACTION_ATTEMPTS = 5
# A visit that ends a segment goes on to launch the next one at once, at most this many phases.
_PHASES_PER_VISIT = 3


class JobNotFound(Exception):
    pass


@dataclass
class Engine:
    db: Database
    backends: BackendResolver
    checkpoints_dir: Path
    clock: Callable[[], datetime] = utcnow
    # Committed checkpoints kept on disk per job; older ones keep their row, not their files.
    keep_checkpoints: int = 2
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    # Where the trackers' runs live (TensorBoard, W&B offline, MLflow's local store); default:
    # beside the checkpoints.
    trackers_dir: Path | None = None
    # BATON_ALLOW_LOCAL_FALLBACK: `kaggle.on_quota_exhausted: local` may move jobs here.
    allow_local_fallback: bool = False
    claims: Claims = field(init=False)
    store: CheckpointStore = field(init=False)

    def __post_init__(self) -> None:
        self.claims = Claims(self.db, self.clock, lease_seconds=self.lease_seconds)
        self.store = CheckpointStore(self.db, self.checkpoints_dir, self.keep_checkpoints)
        trackers_dir = self.trackers_dir or self.checkpoints_dir.parent / "trackers"
        self._ctx = Context(
            self.db,
            self.clock,
            self.store,
            TrackerSync(self.db, trackers_dir, self.clock),
            self.allow_local_fallback,
        )

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
            record_event(
                session, job.id, "submitted", to_state=JobState.QUEUED.value, at=self.clock()
            )
            for warning in spec_warnings(job.spec):
                record_event(session, job.id, "warning", message=warning, at=self.clock())
        return job

    def act(self, user_id: str, job_id: str, action: UserAction) -> Job:
        """Cancel, pause or resume; raises ActionConflict when the state forbids it.

        The engine may move the job between our read and our write: that is not the user's
        conflict, so the compare-and-set is retried against the state it moved to.
        """
        for attempt in range(_ACTION_ATTEMPTS):
            try:
                with self.db.transaction() as session:
                    job = _owned_job(session, user_id, job_id)
                    decision = decide_user_action(job_view(job), action)
                    apply_decision(
                        session, job, decision, JobChanges(next_attempt_at=None), now=self.clock()
                    )
                break
            except StaleState:
                if attempt == _ACTION_ATTEMPTS - 1:
                    raise
        with self.db.transaction() as session:
            fresh = session.get(Job, job_id)
            assert fresh is not None
            return fresh

    def move(self, user_id: str, job_id: str, backend: str, kaggle: dict[str, Any] | None) -> Job:
        """Move a paused job to another backend (`baton move`): its next segment runs there,
        from the newest verified checkpoint, which has the same format everywhere; one whose
        files lie on the old backend's side only (a Kaggle stub) is fetched here first, every
        file verified. Raises ActionConflict unless the job is paused with no live segment;
        ValidationError for a spec the other backend refuses (the API answers 422);
        BackendError when the checkpoint cannot be fetched now."""
        with self.db.transaction() as session:
            job = self._paused_and_idle(user_id, job_id, session)
            spec = moved_spec(job.spec, backend, kaggle)
        if backend != job.backend:
            try:
                latest = self.store.held_resume_point(job_id, self._fetcher(job))
            except NoUsableCheckpoint as exc:
                raise ActionConflict(f"nothing to continue from on {backend}: {exc}") from exc
        else:
            latest = self.store.resume_point(job_id)
        with self.db.transaction() as session:
            job = self._paused_and_idle(user_id, job_id, session)
            switch_backend(session, job, spec, latest)
        with self.db.transaction() as session:
            fresh = session.get(Job, job_id)
            assert fresh is not None
            return fresh

    def _paused_and_idle(self, user_id: str, job_id: str, session: Session) -> Job:
        """The user's job, paused with no live segment (ActionConflict otherwise)."""
        job = _owned_job(session, user_id, job_id)
        if job.state != JobState.PAUSED.value or active_segment(session, job_id) is not None:
            raise ActionConflict(
                f"job is {job.state}; pause it and let its session end before moving it"
            )
        return job

    def hold_checkpoint(self, user_id: str, job_id: str, step: int) -> None:
        """Make sure the files of the job's checkpoint at `step` are here to download, fetching
        them from where its session published them (a stub) under the job's claim. Raises
        BackendError when they cannot be fetched now (Transient while another worker drives the
        job), CorruptCheckpoint when the copy there is unusable (it is rejected)."""
        with self.db.transaction() as session:
            job = _owned_job(session, user_id, job_id)
            row = session.scalars(
                select(Checkpoint).where(Checkpoint.job_id == job_id, Checkpoint.step == step)
            ).first()
        if row is None or row.rejected is not None:
            return
        with self.claims.hold(job_id) as claim:
            if claim is None:
                raise Transient("the job is being reconciled right now; try again", 5.0)
            ref = CheckpointRef(job_id, row.segment_index, row.step)
            self.store.hold(ref, self._fetcher(job))

    def _fetcher(self, job: Job) -> FetchCheckpoint:
        """The job's backend's `fetch_checkpoint`, the backend built only when a stub needs it
        (a job whose checkpoints are all here moves even where Kaggle is out of reach)."""
        return lambda stored, ref: self.backends.for_job(job).fetch_checkpoint(stored, ref)

    # --- choosing what to look at ------------------------------------------------------------

    def due_job_ids(self, now: datetime | None = None, limit: int | None = None) -> list[str]:
        """Jobs that need a look now: unfinished or with a live segment, due by their
        `next_attempt_at`, and not held by a live claim. Oldest due first."""
        query = _DUE if limit is None else _DUE.limit(limit)
        with self.db.transaction() as session:
            return list(session.scalars(query, {"now": now or self.clock()}))

    def park_waiting(self, job_ids: list[str]) -> list[str]:
        """Of these due jobs, those waiting for a quota refresh still ahead, with nothing to do:
        put off until it in one statement (engine/idle.py). The rest need a visit."""
        return park_waiting(self.db, job_ids, self.clock())

    def reconcile_all(self) -> None:
        """Reconcile every due job once (the embedded loop's tick)."""
        for job_id in self.due_job_ids():
            self.reconcile_job(job_id)

    # --- reconciling one job ---------------------------------------------------------------

    def reconcile_job(self, job_id: str) -> None:
        with self.claims.hold(job_id) as claim:
            if claim is None:
                return  # another worker drives it now
            for _ in range(_PHASES_PER_VISIT):
                if not self._visit(job_id, claim):
                    break

    def _visit(self, job_id: str, claim: Claim) -> bool:
        """One phase for the job; True if the next phase can start at once."""
        with self.db.transaction() as session:
            job = session.get(Job, job_id)
            segment = active_segment(session, job_id) if job is not None else None
        if job is None:
            return False
        try:
            backend = self.backends.for_job(job)
        except Rejected as exc:
            self._unreachable(job, segment, str(exc))
            return False
        try:
            step = self._phase(job, segment, backend, claim)
        except Transient as exc:
            self._back_off(job, backend, exc)
            return False
        except (TimeoutError, ConnectionError) as exc:
            # A backend let a network error through its boundary: still only a passing outage.
            self._back_off(job, backend, Transient(f"{type(exc).__name__}: {exc}"))
            return False
        except StaleState as exc:
            log.info("job %s moved while reconciling (%s); the next look re-reads", job_id, exc)
            return False
        except Rejected as exc:
            # Refused for good outside a launch (Kaggle answers 401 to a revoked key): the
            # user's to fix, not a bug in Baton. Fail the job with the reason, no traceback.
            self._unreachable(job, segment, f"{backend.name} refused: {exc}")
            return False
        except Exception as exc:
            self._internal_error(job_id, exc)
            return False
        self._schedule(job.id, step.delay, transient_errors=0)
        return step.again

    def _phase(self, job: Job, segment: Segment | None, backend: Backend, claim: Claim) -> Next:
        state = JobState(job.state)
        if segment is not None:
            if state in FINISHED_JOB_STATES or segment.state == SegmentState.CANCELLING:
                return cancel(self._ctx, job, segment, backend)
            if segment.state == SegmentState.LAUNCHING:
                return launch(self._ctx, job, segment, backend, claim)
            return watch(self._ctx, job, segment, backend)
        if state is JobState.QUEUED:
            return admit_and_launch(self._ctx, job, backend, claim)
        if state is JobState.WAITING:
            return self._wake_if_quota_refreshed(job)
        return Next(None)

    def _wake_if_quota_refreshed(self, job: Job) -> Next:
        now, refresh_at = self.clock(), job.wait_until
        decision = decide_quota(job_view(job), refresh_at, now)
        if decision is not None:
            with self.db.transaction() as session:
                apply_decision(session, job, decision, now=now)
            return Next(None, again=True)
        assert refresh_at is not None
        return Next((refresh_at - now).total_seconds())

    # --- scheduling and errors ---------------------------------------------------------------

    def _schedule(self, job_id: str, delay: float | None, **values: object) -> None:
        due = None if delay is None else self.clock() + timedelta(seconds=delay)
        with self.db.transaction() as session:
            session.execute(
                update(Job)
                .where(Job.id == job_id)
                .values(next_attempt_at=due, **values)
                .execution_options(synchronize_session=False)
            )

    def _back_off(self, job: Job, backend: Backend, exc: Transient) -> None:
        if isinstance(exc, Pending):
            delay = max(exc.retry_after or 0.0, backend.poll_seconds)
            log.info("job %s: %s; next look in %.1f s", job.id, exc, delay)
            self._schedule(job.id, delay)
            return
        errors = job.transient_errors + 1
        delay = backoff_seconds(errors, exc.retry_after, floor=backend.poll_seconds)
        log.warning("job %s: %s; next look in %.0f s", job.id, exc, delay)
        if errors == 1:
            with self.db.transaction() as session:
                record_event(
                    session, job.id, "backend_busy", message=clip(str(exc)), at=self.clock()
                )
        self._schedule(job.id, delay, transient_errors=errors)

    def _unreachable(self, job: Job, segment: Segment | None, why: str) -> None:
        """The job's backend cannot be built (e.g. its Kaggle credentials were deleted): fail
        the job, and abandon its segment with an event saying what may still run."""
        if segment is not None:
            abandon(self._ctx, segment, f"the backend cannot be reached ({why})")
        with self.db.transaction() as session:
            state = JobState(job.state)
            if state not in FINISHED_JOB_STATES and state is not JobState.PAUSED:
                set_job_state(
                    session,
                    job.id,
                    state,
                    JobState.FAILED,
                    event="failed",
                    message=why,
                    changes=JobChanges(reason=clip(why)),
                    now=self.clock(),
                )
        self._schedule(job.id, None)

    def _internal_error(self, job_id: str, exc: BaseException) -> None:
        """A bug in Baton: fail the job once, with the reason and the traceback in the log."""
        log.exception("internal error while reconciling job %s", job_id)
        reason = clip(f"internal error ({type(exc).__name__}: {exc})") or ""
        with self.db.transaction() as session:
            job = session.get(Job, job_id)
            segment = active_segment(session, job_id)
            if job is None:
                return
            state = JobState(job.state)
            if state not in FINISHED_JOB_STATES:
                set_job_state(
                    session,
                    job_id,
                    state,
                    JobState.FAILED,
                    event="internal_error",
                    message=reason,
                    changes=JobChanges(reason=reason),
                    now=self.clock(),
                )
                return
        if segment is not None:
            # The job has ended already and driving its segment is what fails: stop trying.
            abandon(self._ctx, segment, reason)


def _owned_job(session: Session, user_id: str, job_id: str) -> Job:
    """The job, if it is the user's; JobNotFound otherwise (another user's job is not shown)."""
    job = session.get(Job, job_id)
    if job is None or job.user_id != user_id:
        raise JobNotFound(job_id)
    return job
