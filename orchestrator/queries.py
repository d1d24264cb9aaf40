"""The read layer: what a user may see of their jobs, as view models for the API, page and CLI.

Every function takes the user's id and answers only about that user's jobs; a job of someone
else's is `JobNotVisible`, exactly like a job that does not exist.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol, TypeVar

from sqlalchemy import case, func, select, tuple_
from sqlalchemy.orm import Session, aliased

from orchestrator.eta import (
    Eta,
    EtaInputs,
    QuotaPlan,
    SessionRecord,
    estimate_with_range,
    relative_spread,
    typical_fixed_seconds,
    typical_step_seconds,
)
from orchestrator.lifecycle import ACTIVE_SEGMENT_STATES, JobState
from orchestrator.models import Checkpoint, Event, Job, Segment
from orchestrator.session_timings import SessionTimings
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
    SegmentTimings,
)
from worker.boundary.contract import DEFAULT_K_STEPS, DEFAULT_SAFETY_SECONDS, WatchdogPolicy


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


def as_utc(value: datetime) -> datetime:
    # SQLite hands back naive datetimes; every stored time is UTC.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


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
            job_summary(job, history.get(job.id, []), now=now, quota=_quota_of(job, kaggle_quota))
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
    return job_out(job, segments, now=now, quota=_quota_of(job, kaggle_quota))


def _quota_of(job: Job, kaggle_quota: QuotaPlan | None) -> QuotaPlan | None:
    return kaggle_quota if job.backend == "kaggle" else None


def job_out(
    job: Job,
    segments: Sequence[SegmentFacts],
    *,
    now: datetime | None = None,
    quota: QuotaPlan | None = None,
) -> JobOut:
    """The job with its live progress and ETA; `segments` are the job's, in index order."""
    return _with_progress(JobOut.model_validate(job), job, segments, now=now, quota=quota)


def job_summary(
    job: Job,
    segments: Sequence[SegmentFacts],
    *,
    now: datetime | None = None,
    quota: QuotaPlan | None = None,
) -> JobSummary:
    """The job as the list shows it, with its live progress and ETA."""
    return _with_progress(JobSummary.model_validate(job), job, segments, now=now, quota=quota)


_Out = TypeVar("_Out", bound=JobSummary)


def _with_progress(
    out: _Out,
    job: Job,
    segments: Sequence[SegmentFacts],
    *,
    now: datetime | None,
    quota: QuotaPlan | None,
) -> _Out:
    now = now or datetime.now(UTC)
    active = next((s for s in segments if s.state in _ACTIVE), None)
    out.progress = live_progress(job, active, now=now)
    eta = job_eta(job, segments, out.progress, now=now, quota=quota)
    if eta is not None:
        out.eta = EtaOut(
            finish_at=eta.finish_at,
            more_sessions=eta.more_sessions,
            quota_waits=eta.quota_waits,
            text=eta.describe(now),
            earliest=eta.earliest,
            latest=eta.latest,
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
    timings = [t for s in measured if (t := SessionTimings.from_json(s.timings)) is not None]
    history = [
        SessionRecord(s.end_step - s.start_step, t.train, t.setup + t.tail)
        for s, t in zip(measured, timings, strict=True)
        if s.end_step is not None
    ]
    active = next((s for s in segments if s.state in _ACTIVE), None)
    live_steps = progress.step - active.start_step if progress and active else 0
    live_step_seconds = progress.step_seconds if progress else None
    step_seconds = typical_step_seconds(history, live_steps, live_step_seconds) or (
        timings[-1].step_ema if timings else None
    )
    if not isinstance(step_seconds, int | float) or step_seconds <= 0:
        return None
    tail = statistics.median([t.tail for t in timings]) if timings else 0.0
    overhead = typical_fixed_seconds(history) or 0.0
    session = job.spec.get("session", {})
    margin = session.get("margin", {})
    stop_margin = float(margin.get("k_steps", DEFAULT_K_STEPS)) * step_seconds + float(
        margin.get("safety_seconds", DEFAULT_SAFETY_SECONDS)
    )
    current_left = None
    start = now
    if active is not None and active.launched_at is not None:
        elapsed = (now - as_utc(active.launched_at)).total_seconds()
        # Before its first heartbeat a session is still starting: its steps begin once the
        # start-up and load earlier sessions took are over.
        setup = statistics.median([t.setup for t in timings]) if timings else 0.0
        starting = 0.0 if progress is not None else max(0.0, setup - elapsed)
        current_left = max(0.0, active.limit_seconds - elapsed - starting - tail - stop_margin)
        start = now + timedelta(seconds=starting)
    if job.state == JobState.WAITING and job.wait_until is not None:
        start = max(start, as_utc(job.wait_until))
    done = progress.step if progress else job.steps_done
    return estimate_with_range(
        EtaInputs(
            now=start,
            remaining_steps=job.total_steps - done,
            step_seconds=float(step_seconds),
            session_seconds=float(session.get("limit_seconds", 0.0)),
            overhead_seconds=overhead,
            idle_seconds=_mean_idle(segments),
            current_session_left=current_left,
            quota=quota,
            stop_margin_seconds=stop_margin,
            current_step_seconds=live_step_seconds if current_left is not None else None,
        ),
        relative_spread(history),
    )


def _mean_idle(segments: Sequence[SegmentFacts]) -> float:
    """The mean gap between one session's end and the next one's launch."""
    gaps = [
        (as_utc(after.launched_at) - as_utc(before.ended_at)).total_seconds()
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
    beat = active.progress
    if isinstance(beat, dict) and isinstance(beat.get("step"), int):
        return _from_heartbeat(active, beat, job.total_steps, now)
    if job.backend != "kaggle":
        return None  # a heartbeat is on its way (the session is still starting): no guessing
    step_seconds = _previous_step_seconds(active)
    if step_seconds is None or step_seconds <= 0:
        return None
    elapsed = max(0.0, (now - as_utc(active.launched_at)).total_seconds())
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
    active: SegmentFacts, beat: dict[str, Any], total_steps: int, now: datetime
) -> LiveProgress:
    loss = beat.get("loss")
    raw_step_seconds = beat.get("step_seconds")
    step_seconds = float(raw_step_seconds) if isinstance(raw_step_seconds, int | float) else None
    raw_at = beat.get("at")
    at = datetime.fromtimestamp(float(raw_at), UTC) if isinstance(raw_at, int | float) else None
    return LiveProgress(
        segment_index=active.index,
        step=min(total_steps, max(active.start_step, int(beat["step"]))),
        loss=float(loss) if isinstance(loss, int | float) else None,
        step_seconds=step_seconds,
        at=at,
        estimated=False,
        stalled=at is not None and heartbeat_stalled(active, at, step_seconds, now),
        phases=_phases(beat.get("phases")),
    )


def _phases(raw: Any) -> dict[str, float] | None:
    if not isinstance(raw, dict):
        return None
    return {k: float(v) for k, v in raw.items() if isinstance(v, int | float) and v >= 0}


def heartbeat_stalled(
    active: SegmentFacts, at: datetime, step_seconds: float | None, now: datetime
) -> bool:
    """Older than the hang bound the session itself runs under (its launch spec's watchdog)."""
    watchdog = WatchdogPolicy(**((active.launch_spec or {}).get("watchdog") or {}))
    if watchdog.hang_floor_seconds <= 0:
        return False
    return (now - at).total_seconds() > watchdog.hang_bound(step_seconds)


def _previous_step_seconds(active: SegmentFacts) -> float | None:
    # The launch spec carries the step time the previous segments measured.
    estimates = (active.launch_spec or {}).get("estimates") or {}
    value = estimates.get("step_seconds")
    return float(value) if isinstance(value, int | float) else None


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
            "timings": SegmentTimings(**segment.timings) if segment.timings else None,
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
