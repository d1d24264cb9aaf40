"""The read layer: what a user may see of their jobs, as view models for the API, page and CLI.

Every function takes the user's id and answers only about that user's jobs; a job of someone
else's is `JobNotVisible`, exactly like a job that does not exist.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

from sqlalchemy import case, func, select, tuple_
from sqlalchemy.orm import Session, aliased

from orchestrator.eta import Eta, EtaInputs, QuotaPlan, estimate_finish
from orchestrator.lifecycle import ACTIVE_SEGMENT_STATES, JobState
from orchestrator.models import Checkpoint, Event, Job, Segment
from orchestrator.session_timings import SessionTimings
from orchestrator.spec import stored_spec
from orchestrator.wire import (
    CheckpointOut,
    EtaOut,
    EventOut,
    JobList,
    JobOut,
    JobSummary,
    LiveProgress,
    MetricPoint,
    SegmentOut,
)
from worker.boundary.contract import SegmentSpec, WatchdogPolicy
from worker.boundary.heartbeat import Heartbeat


class SegmentFacts(Protocol):
    """What a job's progress and ETA read of one of its segments (a Segment row has them)."""

    index: int
    state: str
    start_step: int
    end_step: int | None
    limit_seconds: float
    timings: dict[str, Any] | None
    progress: dict[str, Any] | None
    launched_at: datetime | None
    ended_at: datetime | None

    @property
    def launch_spec(self) -> dict[str, Any] | None: ...


@dataclass(slots=True)
class _SegmentRow:
    """SegmentFacts read as plain columns: no ORM instance, and the JSON that only a live
    segment needs (its heartbeat, its launch spec) left unread for the others."""

    job_id: str
    index: int
    state: str
    start_step: int
    end_step: int | None
    limit_seconds: float
    timings: dict[str, Any] | None
    progress: dict[str, Any] | None
    launch_spec: dict[str, Any] | None
    launched_at: datetime | None
    ended_at: datetime | None


class JobNotVisible(LookupError):
    """No such job, or not this user's: the two are never told apart."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)  # the API answers "job <id> not found"
        self.job_id = job_id


def own_job(session: Session, user_id: str, job_id: str) -> Job:
    job = session.get(Job, job_id)
    if job is None or job.user_id != user_id:
        raise JobNotVisible(job_id)
    return job


def list_jobs(
    session: Session,
    user_id: str,
    *,
    state: JobState | None = None,
    limit: int = 100,
    offset: int = 0,
    after: str | None = None,
    now: datetime | None = None,
    kaggle_quota: QuotaPlan | None = None,
) -> JobList:
    """The user's jobs, newest first, with live progress for the running ones: `limit` of them
    after the job `after` (a keyset cursor: the previous page's last job) if given, then past
    `offset`. A job id that is not one of the user's jobs gives an empty page."""
    mine = [Job.user_id == user_id]
    if state is not None:
        mine.append(Job.state == state.value)
    total = session.scalar(select(func.count()).select_from(Job).where(*mine)) or 0
    order = (Job.created_at.desc(), Job.id.desc())
    page = select(Job.id).where(*mine).order_by(*order).limit(limit).offset(offset)
    if after is not None:
        anchor = aliased(Job)
        created = select(anchor.created_at).where(anchor.id == after, anchor.user_id == user_id)
        page = page.where(tuple_(Job.created_at, Job.id) < tuple_(created.scalar_subquery(), after))
    # The page's ids come from the index (ix_jobs_user_created_id) alone: an offset then skips
    # index entries, not whole rows.
    rows = list(
        session.scalars(select(Job).where(Job.id.in_(page.scalar_subquery())).order_by(*order))
    )
    history = _segments_by_job(session, [job.id for job in rows])
    last = rows[-1] if len(rows) == limit else None
    return JobList(
        items=[
            job_out(
                JobSummary,
                job,
                history.get(job.id, []),
                now=now,
                quota=_quota_of(job, kaggle_quota),
            )
            for job in rows
        ],
        total=total,
        next_cursor=last.id if last is not None else None,
    )


def get_job(
    session: Session,
    user_id: str,
    job_id: str,
    *,
    now: datetime | None = None,
    kaggle_quota: QuotaPlan | None = None,
) -> JobOut:
    """The job; `kaggle_quota`, if known, makes a Kaggle job's ETA count quota and refreshes."""
    job = own_job(session, user_id, job_id)
    segments = _segments_by_job(session, [job.id]).get(job.id, [])
    return job_out(JobOut, job, segments, now=now, quota=_quota_of(job, kaggle_quota))


def _quota_of(job: Job, kaggle_quota: QuotaPlan | None) -> QuotaPlan | None:
    return kaggle_quota if job.backend == "kaggle" else None


_Out = TypeVar("_Out", bound=JobSummary)


def job_out(
    model: type[_Out],
    job: Job,
    segments: Sequence[SegmentFacts],
    *,
    now: datetime | None = None,
    quota: QuotaPlan | None = None,
) -> _Out:
    """The job as `model` (JobOut, or JobSummary for the list) with its live progress and ETA;
    `segments` are the job's, in index order."""
    out = model.model_validate(job)
    now = now or datetime.now(UTC)
    active = next((s for s in segments if s.state in _ACTIVE), None)
    out.progress = live_progress(job, active, now=now)
    eta = job_eta(job, segments, out.progress, now=now, quota=quota)
    if eta is not None:
        out.eta = EtaOut(
            finish_at=eta.finish_at,
            more_sessions=eta.more_sessions,
            quota_waits=eta.quota_waits,
            text=eta.describe(),
        )
    return out


_ACTIVE = frozenset(state.value for state in ACTIVE_SEGMENT_STATES)
_ETA_STATES = frozenset({JobState.QUEUED, JobState.RUNNING, JobState.WAITING})


def job_eta(
    job: Job,
    segments: Sequence[SegmentFacts],
    progress: LiveProgress | None,
    *,
    now: datetime,
    quota: QuotaPlan | None = None,
) -> Eta | None:
    """The ETA of an unfinished, unpaused job from what its segments measured, or None."""
    if job.state not in _ETA_STATES:
        return None
    measured = [s for s in segments if s.timings and s.end_step is not None]
    timings = (SessionTimings.from_json(measured[-1].timings) if measured else None) or (
        SessionTimings()
    )
    step_seconds = (progress.step_seconds if progress else None) or timings.step_ema
    if not isinstance(step_seconds, int | float) or step_seconds <= 0:
        return None
    tail = timings.tail
    overhead = tail + timings.setup
    session_seconds = stored_spec(job.spec).session.limit_seconds
    active = next((s for s in segments if s.state in _ACTIVE), None)
    current_left = None
    if active is not None and active.launched_at is not None:
        elapsed = (now - active.launched_at).total_seconds()
        current_left = max(0.0, active.limit_seconds - elapsed - tail)
    start = now
    if job.state == JobState.WAITING and job.wait_until is not None:
        start = max(now, job.wait_until)
    done = progress.step if progress else job.steps_done
    return estimate_finish(
        EtaInputs(
            now=start,
            remaining_steps=job.total_steps - done,
            step_seconds=float(step_seconds),
            session_seconds=session_seconds,
            overhead_seconds=overhead,
            idle_seconds=_mean_idle(segments),
            current_session_left=current_left,
            quota=quota,
        )
    )


def _mean_idle(segments: Sequence[SegmentFacts]) -> float:
    """The mean gap between one session's end and the next one's launch."""
    gaps = [
        (after.launched_at - before.ended_at).total_seconds()
        for before, after in itertools.pairwise(segments)
        if before.ended_at is not None and after.launched_at is not None
    ]
    return max(0.0, sum(gaps) / len(gaps)) if gaps else 0.0


def _segments_by_job(session: Session, job_ids: list[str]) -> dict[str, list[SegmentFacts]]:
    """The segments of all these jobs in one statement, in index order."""
    found: dict[str, list[SegmentFacts]] = {}
    if not job_ids:
        return found
    live = Segment.state.in_(_ACTIVE)
    rows = session.execute(
        select(
            Segment.job_id,
            Segment.index,
            Segment.state,
            Segment.start_step,
            Segment.end_step,
            Segment.limit_seconds,
            Segment.timings,
            case((live, Segment.progress)).label("progress"),
            case((live, Segment.launch_spec)).label("launch_spec"),
            Segment.launched_at,
            Segment.ended_at,
        )
        .where(Segment.job_id.in_(job_ids))
        .order_by(Segment.job_id, Segment.index)
    )
    for row in rows:
        found.setdefault(row.job_id, []).append(_SegmentRow(*row))
    return found


def live_progress(job: Job, active: SegmentFacts | None, *, now: datetime) -> LiveProgress | None:
    """Where the running segment is: its heartbeat, or an estimate where none reaches us."""
    if active is None or active.launched_at is None:
        return None
    beat = Heartbeat.from_json(active.progress)
    if beat is not None:
        return _from_heartbeat(active, beat, job.total_steps, now)
    if job.backend != "kaggle":
        return None  # a heartbeat is on its way (the session is still starting): no guessing
    step_seconds = _previous_step_seconds(active)
    if step_seconds is None or step_seconds <= 0:
        return None
    elapsed = max(0.0, (now - active.launched_at).total_seconds())
    steps = int(elapsed / step_seconds)
    return LiveProgress(
        segment_index=active.index,
        step=min(job.total_steps, active.start_step + steps),
        loss=None,
        step_seconds=step_seconds,
        at=now,
        estimated=True,
    )


def _from_heartbeat(
    active: SegmentFacts, beat: Heartbeat, total_steps: int, now: datetime
) -> LiveProgress:
    launched = _launch_spec(active)
    watchdog = launched.watchdog if launched is not None else WatchdogPolicy()
    return LiveProgress(
        segment_index=active.index,
        step=min(total_steps, max(active.start_step, beat.step)),
        loss=beat.loss,
        step_seconds=beat.step_seconds,
        at=beat.written_at,
        estimated=False,
        stalled=beat.stalled(watchdog, now),
    )


def _launch_spec(active: SegmentFacts) -> SegmentSpec | None:
    """The SegmentSpec the session was sent (the read layer leaves it unread for ended ones)."""
    return SegmentSpec.from_dict(active.launch_spec) if active.launch_spec else None


def _previous_step_seconds(active: SegmentFacts) -> float | None:
    # The launch spec carries the step time the previous segments measured.
    launched = _launch_spec(active)
    return launched.estimates.step_seconds if launched is not None else None


def list_segments(session: Session, user_id: str, job_id: str) -> list[SegmentOut]:
    own_job(session, user_id, job_id)
    segments = session.scalars(
        select(Segment).where(Segment.job_id == job_id).order_by(Segment.index)
    ).all()
    checkpoints = {
        row.segment_index: row
        for row in session.scalars(select(Checkpoint).where(Checkpoint.job_id == job_id))
    }
    return [segment_out(segment, checkpoints.get(segment.index)) for segment in segments]


def segment_out(segment: Segment, checkpoint: Checkpoint | None) -> SegmentOut:
    return SegmentOut.model_validate(
        {
            "index": segment.index,
            "state": segment.state,
            "outcome": segment.outcome,
            "start_step": segment.start_step,
            "end_step": segment.end_step,
            "limit_seconds": segment.limit_seconds,
            "timings": SessionTimings.from_json(segment.timings),
            "error": segment.error,
            "checkpoint": checkpoint.manifest if checkpoint else None,
            "created_at": segment.created_at,
            "launched_at": segment.launched_at,
            "ended_at": segment.ended_at,
        }
    )


def find_segment(session: Session, user_id: str, job_id: str, index: int) -> Segment | None:
    own_job(session, user_id, job_id)
    return session.scalars(
        select(Segment).where(Segment.job_id == job_id, Segment.index == index)
    ).first()


def list_events(session: Session, user_id: str, job_id: str, *, after: int = 0) -> list[EventOut]:
    own_job(session, user_id, job_id)
    query = select(Event).where(Event.job_id == job_id, Event.id > after).order_by(Event.id)
    return [EventOut.model_validate(row) for row in session.scalars(query)]


def list_metrics(session: Session, user_id: str, job_id: str) -> list[MetricPoint]:
    """The metric series of every committed segment, in step order."""
    own_job(session, user_id, job_id)
    segments = session.scalars(
        select(Segment)
        .where(Segment.job_id == job_id, Segment.end_step.is_not(None))
        .order_by(Segment.index)
    )
    points = []
    for segment in segments:
        for entry in segment.metrics or []:
            values = {k: float(v) for k, v in entry.items() if k != "step"}
            points.append(
                MetricPoint(segment_index=segment.index, step=int(entry["step"]), values=values)
            )
    return points


def list_checkpoints(session: Session, user_id: str, job_id: str) -> list[CheckpointOut]:
    """The job's kept checkpoints, oldest first: those whose files can still be downloaded."""
    own_job(session, user_id, job_id)
    rows = session.scalars(
        select(Checkpoint).where(Checkpoint.job_id == job_id).order_by(Checkpoint.step)
    )
    return [CheckpointOut.model_validate(row) for row in rows if files_kept(row)]


def files_kept(checkpoint: Checkpoint) -> bool:
    """Whether a checkpoint's files are still there to download. The store keeps the newest few
    good checkpoints and deletes the files of older and rejected ones, keeping their rows (a
    segment's history names its checkpoint); a listing shows only what a download can fetch."""
    return checkpoint.rejected is None and Path(checkpoint.location).is_dir()


def find_checkpoint(
    session: Session, user_id: str, job_id: str, step: int | None = None
) -> Checkpoint | None:
    """The checkpoint at `step`, or the latest one."""
    own_job(session, user_id, job_id)
    query = select(Checkpoint).where(Checkpoint.job_id == job_id)
    if step is not None:
        query = query.where(Checkpoint.step == step)
    return session.scalars(query.order_by(Checkpoint.step.desc(), Checkpoint.id.desc())).first()
