"""The read layer: what a user may see of their jobs, as view models for the API, page and CLI.

Every function takes the user's id and answers only about that user's jobs; a job of someone
else's is `JobNotVisible`, exactly like a job that does not exist.
"""

from __future__ import annotations

import functools
import itertools
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import (
    Integer,
    Label,
    Select,
    Text,
    bindparam,
    case,
    cast,
    func,
    literal_column,
    select,
    tuple_,
)
from sqlalchemy.orm import QueryableAttribute, Session, aliased

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
    LiveProgress,
    MetricPoint,
    SegmentOut,
)
from worker.boundary.contract import (
    DEFAULT_K_STEPS,
    DEFAULT_SAFETY_SECONDS,
    MarginPolicy,
    SegmentSpec,
    WatchdogPolicy,
)
from worker.boundary.heartbeat import Heartbeat
from worker.boundary.transport import REMOTE_FILE


class SegmentFacts(Protocol):
    """What a job's progress and ETA read of one of its segments (a Segment row has them)."""

    index: int
    state: str
    start_step: int
    end_step: int | None
    limit_seconds: float
    progress: dict[str, Any] | None
    launched_at: datetime | None
    ended_at: datetime | None

    @property
    def timings(self) -> dict[str, Any] | None: ...

    @property
    def launch_spec(self) -> dict[str, Any] | None: ...


@dataclass(slots=True)
class _SegmentRow:
    """SegmentFacts read as plain columns: no ORM instance, the JSON that only a live segment
    needs (its heartbeat, its launch spec) left unread for the others, and the timings parsed
    only if asked for (the ETA reads the last measured segment's)."""

    job_id: str
    index: int
    state: str
    start_step: int
    end_step: int | None
    limit_seconds: float
    timings_text: str | None
    progress: dict[str, Any] | None
    launch_spec: dict[str, Any] | None
    launched_at: datetime | None
    ended_at: datetime | None

    @property
    def timings(self) -> dict[str, Any] | None:
        if self.timings_text is None:
            return None
        parsed: dict[str, Any] | None = json.loads(self.timings_text)
        return parsed


class JobFacts(Protocol):
    """What a job's progress and ETA read of the job itself (a Job row has them)."""

    backend: str
    state: str
    total_steps: int
    steps_done: int
    wait_until: datetime | None


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
    `offset`. A job id that is not one of the user's jobs gives an empty page.

    One statement reads the page: the count, the page's jobs and all their segments (a second
    one counts only when the page is empty). Rows are read as plain columns and the answer is
    built without validating again what the database returned: every open job page and `watch`
    repeats this read, and its CPU is what limits how many the API serves
    (`python -m benchmarks.list_cpu`)."""
    statement = _page_statement(by_state=state is not None, after_cursor=after is not None)
    params = {"user_id": user_id, "limit": limit, "offset": offset, "state": None, "after": after}
    if state is not None:
        params["state"] = state.value
    rows = session.connection().execute(statement, params).all()
    if rows:
        total = rows[0][0]
    else:
        count = select(func.count()).select_from(Job).where(Job.user_id == user_id)
        if state is not None:
            count = count.where(Job.state == state.value)
        total = session.connection().scalar(count) or 0
    items = []
    for job_id, group in itertools.groupby(rows, key=lambda row: row[1]):
        lines = list(group)
        columns = lines[0][1:_SEGMENT_AT]
        job = _JobRow(*columns)
        segments: list[SegmentFacts] = [
            _SegmentRow(job_id, *line[_SEGMENT_AT:])
            for line in lines
            if line[_SEGMENT_AT] is not None
        ]
        quota = kaggle_quota if job.backend == "kaggle" else None
        session_rule = SessionLimits.read(job.session_seconds, job.k_steps, job.safety_seconds)
        progress, eta = _progress_and_eta(job, segments, session=session_rule, now=now, quota=quota)
        shown = dict(zip(_SHOWN, columns, strict=False))  # all but the spec's session rule
        items.append(shown | {"progress": progress, "eta": eta})
    last = items[-1]["id"] if len(items) == limit else None
    # Validated in one call from plain values (pydantic's core, no ORM attribute reads).
    return JobList.model_validate({"items": items, "total": total, "next_cursor": last})


@dataclass(slots=True)
class _JobShown:
    """The job columns the list and GET both show (JobSummary's fields), in _JOB_COLUMNS' order."""

    id: str
    name: str
    backend: str
    state: str
    steps_done: int
    total_steps: int
    pause_requested: bool
    wait_until: datetime | None
    reason: str | None
    queue_reason: str | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


@dataclass(slots=True)
class _JobRow(_JobShown):
    """A job as the list reads it: the columns it shows, and its spec's session rule only."""

    session_seconds: float | None
    k_steps: float | None
    safety_seconds: float | None


_JOB_COLUMNS = (
    Job.id,
    Job.name,
    Job.backend,
    Job.state,
    Job.steps_done,
    Job.total_steps,
    Job.pause_requested,
    Job.wait_until,
    Job.reason,
    Job.queue_reason,
    Job.created_at,
    Job.updated_at,
    Job.started_at,
    Job.finished_at,
    Job.spec["session"]["limit_seconds"].as_float(),
    Job.spec["session"]["margin"]["k_steps"].as_float(),
    Job.spec["session"]["margin"]["safety_seconds"].as_float(),
)
_SESSION_RULE_COLUMNS = 3
# The JobSummary fields: every column but the session rule.
_SHOWN = [column.key for column in _JOB_COLUMNS[:-_SESSION_RULE_COLUMNS]]
_SEGMENT_AT = 1 + len(_JOB_COLUMNS)  # after the count and the job's columns


@functools.cache
def _page_statement(*, by_state: bool, after_cursor: bool) -> Select[Any]:
    """The list page's one statement, built once per shape (with or without a state filter and
    a cursor); the values come as parameters: user_id, state, after, limit, offset."""
    mine = [Job.user_id == bindparam("user_id")]
    if by_state:
        mine.append(Job.state == bindparam("state"))
    # Uncorrelated: computed once per statement, not per row.
    total = select(func.count()).select_from(Job).where(*mine).scalar_subquery()
    order = (Job.created_at.desc(), Job.id.desc())
    page = (
        select(Job.id)
        .where(*mine)
        .order_by(*order)
        .limit(bindparam("limit", type_=Integer))
        .offset(bindparam("offset", type_=Integer))
    )
    if after_cursor:
        anchor = aliased(Job)
        created = select(anchor.created_at).where(
            anchor.id == bindparam("after"), anchor.user_id == bindparam("user_id")
        )
        page = page.where(
            tuple_(Job.created_at, Job.id) < tuple_(created.scalar_subquery(), bindparam("after"))
        )
    # The page's ids come from the index (ix_jobs_user_created_id) alone: an offset then skips
    # index entries, not whole rows.
    return (
        select(total, *_JOB_COLUMNS, *_segment_columns())
        .select_from(Job)
        .outerjoin(Segment, Segment.job_id == Job.id)
        .where(Job.id.in_(page.scalar_subquery()))
        .order_by(*order, Segment.index)
    )


def get_job(
    session: Session,
    user_id: str,
    job_id: str,
    *,
    now: datetime | None = None,
    kaggle_quota: QuotaPlan | None = None,
) -> JobOut:
    """The job; `kaggle_quota`, if known, makes a Kaggle job's ETA count quota and refreshes.
    One statement reads the job and its segments, as plain columns (every open job page and
    `watch` repeats this read)."""
    lines = session.connection().execute(_job_statement(), {"job_id": job_id, "user_id": user_id})
    rows = lines.all()
    if not rows:
        raise JobNotVisible(job_id)
    job = _JobDetail(*rows[0][:_DETAIL_SEGMENT_AT])
    segments: list[SegmentFacts] = [
        _SegmentRow(job_id, *row[_DETAIL_SEGMENT_AT:])
        for row in rows
        if row[_DETAIL_SEGMENT_AT] is not None
    ]
    quota = kaggle_quota if job.backend == "kaggle" else None
    return job_out(job, segments, now=now, quota=quota)


@dataclass(slots=True)
class _JobDetail(_JobShown):
    """A job as GET reads it: what JobOut shows."""

    failures: int
    spec: dict[str, Any]


_DETAIL_SEGMENT_AT = len(_SHOWN) + 2


@functools.cache
def _job_statement() -> Select[Any]:
    """A job of a user's and its segments in index order (none: no row), built once."""
    shown = _JOB_COLUMNS[:-_SESSION_RULE_COLUMNS]
    return (
        select(*shown, Job.failures, Job.spec, *_segment_columns())
        .select_from(Job)
        .outerjoin(Segment, Segment.job_id == Job.id)
        .where(Job.id == bindparam("job_id"), Job.user_id == bindparam("user_id"))
        .order_by(Segment.index)
    )


def job_out(
    job: Job | _JobDetail,
    segments: Sequence[SegmentFacts],
    *,
    now: datetime | None = None,
    quota: QuotaPlan | None = None,
) -> JobOut:
    """The job with its live progress and ETA; `segments` are the job's, in index order."""
    session = SessionLimits.of_spec(job.spec)
    out = JobOut.model_validate(job)
    out.progress, out.eta = _progress_and_eta(job, segments, session=session, now=now, quota=quota)
    return out


@dataclass(frozen=True, slots=True)
class SessionLimits:
    """What a job's ETA reads of its spec: the session limit and the deadline rule's margin."""

    limit_seconds: float
    margin: MarginPolicy

    @classmethod
    def read(
        cls, limit: float | None, k_steps: float | None, safety_seconds: float | None
    ) -> SessionLimits:
        """From the stored spec's values, each absent one at the spec's default."""
        margin = MarginPolicy(
            DEFAULT_K_STEPS if k_steps is None else float(k_steps),
            DEFAULT_SAFETY_SECONDS if safety_seconds is None else float(safety_seconds),
        )
        return cls(float(limit or 0.0), margin)

    @classmethod
    def of_spec(cls, spec: dict[str, Any]) -> SessionLimits:
        """From a stored spec: three values read by key, since validating the whole spec would
        cost every GET its CPU (benchmarks/list_cpu.py)."""
        rule = spec.get("session") or {}
        margin = rule.get("margin") or {}
        return cls.read(
            rule.get("limit_seconds"), margin.get("k_steps"), margin.get("safety_seconds")
        )


def _progress_and_eta(
    job: JobFacts,
    segments: Sequence[SegmentFacts],
    *,
    session: SessionLimits,
    now: datetime | None,
    quota: QuotaPlan | None,
) -> tuple[LiveProgress | None, EtaOut | None]:
    now = now or datetime.now(UTC)
    active = next((s for s in segments if s.state in _ACTIVE), None)
    progress = live_progress(job, active, now=now)
    eta = job_eta(job, segments, progress, session=session, now=now, quota=quota)
    if eta is None:
        return progress, None
    shown = EtaOut(
        finish_at=eta.finish_at,
        more_sessions=eta.more_sessions,
        quota_waits=eta.quota_waits,
        text=eta.describe(now),
        earliest=eta.earliest,
        latest=eta.latest,
    )
    return progress, shown


_ACTIVE = frozenset(state.value for state in ACTIVE_SEGMENT_STATES)
_ETA_STATES = frozenset({JobState.QUEUED, JobState.RUNNING, JobState.WAITING})


def job_eta(
    job: JobFacts,
    segments: Sequence[SegmentFacts],
    progress: LiveProgress | None,
    *,
    session: SessionLimits,
    now: datetime,
    quota: QuotaPlan | None = None,
) -> Eta | None:
    """The ETA of an unfinished, unpaused job from what its segments measured, or None."""
    if job.state not in _ETA_STATES:
        return None
    measured = [
        (s.end_step - s.start_step, t)
        for s in segments
        if s.end_step is not None and (t := SessionTimings.from_json(s.timings)) is not None
    ]
    timings = [t for _, t in measured]
    history = [SessionRecord(steps, t.train, t.setup + t.tail) for steps, t in measured]
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
    stop_margin = session.margin.k_steps * step_seconds + session.margin.safety_seconds
    current_left = None
    start = now
    if active is not None and active.launched_at is not None:
        elapsed = (now - active.launched_at).total_seconds()
        # Before its first heartbeat a session is still starting: its steps begin once the
        # start-up and load earlier sessions took are over.
        setup = statistics.median([t.setup for t in timings]) if timings else 0.0
        starting = 0.0 if progress is not None else max(0.0, setup - elapsed)
        current_left = max(0.0, active.limit_seconds - elapsed - starting - tail - stop_margin)
        start = now + timedelta(seconds=starting)
    if job.state == JobState.WAITING and job.wait_until is not None:
        start = max(start, job.wait_until)
    done = progress.step if progress else job.steps_done
    return estimate_with_range(
        EtaInputs(
            now=start,
            remaining_steps=job.total_steps - done,
            step_seconds=float(step_seconds),
            session_seconds=session.limit_seconds,
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
        (after.launched_at - before.ended_at).total_seconds()
        for before, after in itertools.pairwise(segments)
        if before.ended_at is not None and after.launched_at is not None
    ]
    return max(0.0, sum(gaps) / len(gaps)) if gaps else 0.0


@functools.cache
def _segment_columns() -> tuple[QueryableAttribute[Any] | Label[Any], ...]:
    """A segment's columns as _SegmentRow reads them (after its job_id)."""
    # The live states as constants in the statement, not a parameter list expanded at each
    # execution.
    live = Segment.state.in_([literal_column(f"'{state}'") for state in sorted(_ACTIVE)])
    return (
        Segment.index,
        Segment.state,
        Segment.start_step,
        Segment.end_step,
        Segment.limit_seconds,
        cast(Segment.timings, Text).label("timings"),
        case((live, Segment.progress)).label("progress"),
        case((live, Segment.launch_spec)).label("launch_spec"),
        Segment.launched_at,
        Segment.ended_at,
    )


def live_progress(
    job: JobFacts, active: SegmentFacts | None, *, now: datetime
) -> LiveProgress | None:
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
        phases=beat.phases,
        metrics=beat.metrics,
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
    own_job(session, user_id, job_id)
    return committed_metrics(session, job_id)


def committed_metrics(session: Session, job_id: str) -> list[MetricPoint]:
    """The job's metric series from its committed segments: one point per step, in step order.

    A failed session's steps never count (the next one trains them again from the last commit).
    A segment that resumed from an older checkpoint than the one before it ended on (that one was
    rejected) replaces the steps it trained again.
    """
    segments = session.scalars(
        select(Segment)
        .where(Segment.job_id == job_id, Segment.end_step.is_not(None))
        .order_by(Segment.index)
    )
    points: list[MetricPoint] = []
    for segment in segments:
        points = [point for point in points if point.step <= segment.start_step]
        for entry in segment.metrics or []:
            step = int(entry["step"])
            if step > segment.start_step:
                values = {k: float(v) for k, v in entry.items() if k != "step"}
                points.append(MetricPoint(segment_index=segment.index, step=step, values=values))
    return points


def list_checkpoints(
    session: Session, user_id: str, job_id: str, *, include_pruned: bool = False
) -> list[CheckpointOut]:
    """The job's checkpoints, oldest first: those whose files can still be downloaded, or with
    `include_pruned` every committed one, each saying whether its files are kept."""
    own_job(session, user_id, job_id)
    rows = session.scalars(
        select(Checkpoint).where(Checkpoint.job_id == job_id).order_by(Checkpoint.step)
    )
    listed = []
    for row in rows:
        kept = files_kept(row)
        if kept or include_pruned:
            on_kaggle = kept and (Path(row.location) / REMOTE_FILE).is_file()
            update = {"kept": kept, "on_kaggle": on_kaggle}
            listed.append(CheckpointOut.model_validate(row).model_copy(update=update))
    return listed


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
