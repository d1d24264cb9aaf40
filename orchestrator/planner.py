"""Segment planning: where the next segment starts, how long it may run, what it should expect.

Pure: the engine passes in the job's spec, its latest committed checkpoint and the history of
earlier segments; the costs those segments measured become the next segment's estimates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from orchestrator.spec import MIN_SESSION_SECONDS, JobSpec
from worker.contract import (
    CHECKPOINT_DIR,
    Estimates,
    ExpectedCheckpoint,
    MarginPolicy,
    SegmentSpec,
    WatchdogPolicy,
)

# Learned costs use the worst of the last few segments, padded: a save that took 10 s last time
# may take 12 s this time, and overrunning the deadline loses the whole session.
ESTIMATE_WINDOW = 3
ESTIMATE_PADDING = 1.25
INPUT_CHECKPOINT = f"input/{CHECKPOINT_DIR}"
USEFUL_FACTOR = 2.0


@dataclass(frozen=True)
class CheckpointRef:
    segment_index: int
    step: int


@dataclass(frozen=True)
class PastSegment:
    """Measured costs of an earlier segment that committed (from its result.json timings)."""

    save_seconds: float
    upload_seconds: float
    worker_seconds: float  # worker's own total, process start to result.json
    session_seconds: float | None  # the backend's wall time for the whole session
    step_seconds: float | None  # the segment's step_time_ema
    setup_seconds: float = 0.0  # start-up plus load: what a session spends before its first step

    @property
    def fixed_seconds(self) -> float:
        """Everything a session spends outside training steps."""
        exit_seconds = max(0.0, (self.session_seconds or 0.0) - self.worker_seconds)
        return self.setup_seconds + self.save_seconds + self.upload_seconds + exit_seconds


@dataclass(frozen=True)
class SegmentPlan:
    index: int
    start_step: int
    limit_seconds: float
    estimates: Estimates
    resume: CheckpointRef | None
    # Times the job was rolled back after diverging: each shifts the data-order seed.
    rollbacks: int = 0


def minimum_session_seconds(history: Sequence[PastSegment]) -> float:
    """The shortest session worth launching: at least half of it must be training steps.

    Below that, quota is better spent after the refresh than on sessions that mostly boot. The
    fixed cost is the (lower) median of the last few sessions, not the worst: quota left at the
    refresh is lost, so one slow start-up (a busy host) must not skip the week's last session
    for the next three segments. A session that turns out short still commits at its deadline.
    """
    recent = sorted(past.fixed_seconds for past in list(history)[-ESTIMATE_WINDOW:])
    fixed = recent[(len(recent) - 1) // 2] if recent else 0.0  # the lower median of two
    return max(MIN_SESSION_SECONDS, USEFUL_FACTOR * fixed)


def startup_floor_seconds(history: Sequence[PastSegment]) -> float | None:
    """The shortest session that can still commit a new step: the slowest recent start-up,
    load, save and exit plus one step, padded. None before any session measured them."""
    recent = list(history)[-ESTIMATE_WINDOW:]
    if not recent:
        return None
    worst = max(past.fixed_seconds + (past.step_seconds or 0.0) for past in recent)
    return worst * ESTIMATE_PADDING


def too_short_for_startup(limit_seconds: float, history: Sequence[PastSegment]) -> str | None:
    """Why sessions of `limit_seconds` cannot make progress on this job, or None if they can.

    Such a session is killed at its limit before it commits (an empty log, its output
    dropped), session after session: the planner refuses to launch it instead.
    """
    floor = startup_floor_seconds(history)
    if floor is None or limit_seconds >= floor:
        return None
    return (
        f"sessions of {limit_seconds:.0f} s are shorter than this job's measured start-up, "
        f"load, save and one step ({floor:.0f} s): raise session.limit_seconds"
    )


def learn_estimates(history: Sequence[PastSegment]) -> Estimates:
    recent = list(history)[-ESTIMATE_WINDOW:]
    if not recent:
        return Estimates()
    exits = [
        max(0.0, past.session_seconds - past.worker_seconds)
        for past in recent
        if past.session_seconds is not None
    ]
    steps = [past.step_seconds for past in recent if past.step_seconds is not None]
    return Estimates(
        save_seconds=max(past.save_seconds for past in recent) * ESTIMATE_PADDING,
        upload_seconds=max(past.upload_seconds for past in recent) * ESTIMATE_PADDING,
        exit_seconds=max(exits, default=0.0) * ESTIMATE_PADDING,
        step_seconds=steps[-1] if steps else None,
    )


def plan_next_segment(
    spec: JobSpec,
    next_index: int,
    latest: CheckpointRef | None,
    history: Sequence[PastSegment],
    quota_seconds: float | None = None,
    rollbacks: int = 0,
) -> SegmentPlan:
    limit = spec.session.limit_seconds
    if quota_seconds is not None:
        limit = min(limit, quota_seconds)
    estimates = learn_estimates(history)
    if spec.kaggle is not None and spec.kaggle.self_chain:
        # The segment publishes and pushes before its deadline: keep time for that.
        upload = max(estimates.upload_seconds, spec.kaggle.chain_reserve_seconds)
        estimates = replace(estimates, upload_seconds=upload)
    return SegmentPlan(
        index=next_index,
        start_step=latest.step if latest else 0,
        limit_seconds=limit,
        estimates=estimates,
        resume=latest,
        rollbacks=rollbacks,
    )


def data_order_seed(seed: int, rollbacks: int) -> int:
    """The seed a segment runs with: the job's, shifted once per rollback after a divergence.

    Resumed state (model, optimizer, RNG streams) comes from the checkpoint either way; what the
    seed still decides after a resume is the data order of the steps to come.
    """
    return (seed + rollbacks) % 2**32


def build_segment_spec(job_id: str, spec: JobSpec, plan: SegmentPlan) -> SegmentSpec:
    expect = None
    if plan.resume is not None:
        expect = ExpectedCheckpoint(job_id, plan.resume.segment_index, plan.resume.step)
    return SegmentSpec(
        job_id=job_id,
        segment_index=plan.index,
        trainer=spec.trainer,
        config=spec.config,
        total_steps=spec.total_steps,
        limit_seconds=plan.limit_seconds,
        seed=data_order_seed(spec.seed, plan.rollbacks),
        margin=MarginPolicy(
            k_steps=spec.session.margin.k_steps,
            safety_seconds=spec.session.margin.safety_seconds,
        ),
        estimates=plan.estimates,
        resume_path=INPUT_CHECKPOINT if plan.resume else None,
        expect=expect,
        nproc=spec.nproc,
        watchdog=WatchdogPolicy(
            hang_multiple=spec.session.watchdog.hang_multiple,
            hang_floor_seconds=spec.session.watchdog.hang_floor_seconds,
            divergence_steps=spec.session.watchdog.divergence_steps,
        ),
    )
