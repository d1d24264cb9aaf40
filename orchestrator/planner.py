"""Segment planning: where the next segment starts, how long it may run, what it should expect.

Pure: the engine passes in the job's spec, its latest committed checkpoint and the history of
earlier segments; the costs those segments measured become the next segment's estimates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from orchestrator.spec import MIN_SESSION_SECONDS, JobSpec
from worker.boundary.contract import (
    CheckpointRef,
    Estimates,
    MarginPolicy,
    SegmentSpec,
    WatchdogPolicy,
)
from worker.boundary.paths import RESUME_PATH
from worker.boundary.planning import (
    ESTIMATE_WINDOW,
    PastSegment,
    learn_estimates,
    next_checkpoint_bytes,
    publish_seconds,
)
from worker.boundary.planning import minimum_session_seconds as _minimum_session_seconds


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
    """The shortest session worth launching (worker/boundary/planning.py), never below
    MIN_SESSION_SECONDS."""
    return _minimum_session_seconds(history, MIN_SESSION_SECONDS)


def startup_floor_seconds(history: Sequence[PastSegment]) -> float | None:
    """The start-up and load of the fastest of the last few sessions: a session shorter than
    that never reaches its first step. The fastest, not the worst: one start-up slowed by a
    busy host must not fail a job whose sessions fit. None before any session measured it."""
    recent = list(history)[-ESTIMATE_WINDOW:]
    if not recent:
        return None
    return min(past.setup_seconds for past in recent)


def too_short_for_startup(limit_seconds: float, history: Sequence[PastSegment]) -> str | None:
    """Why sessions of `limit_seconds` cannot make progress on this job, or None if they can.

    Such a session is killed at its limit before it commits (an empty log, its output
    dropped), session after session: the planner refuses to launch it instead.
    """
    floor = startup_floor_seconds(history)
    if floor is None or limit_seconds >= floor:
        return None
    return (
        f"sessions of {limit_seconds:.0f} s are shorter than this job's measured start-up "
        f"and load ({floor:.0f} s): raise session.limit_seconds"
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
    # A self-chaining segment publishes and pushes before its deadline, and one with the
    # in-kernel transport publishes: keep time for the checkpoint it will write, at the rate
    # earlier segments published at (worker/boundary/planning.py, shared with the kernels).
    guess = spec.predicted_checkpoint_bytes()
    size = next_checkpoint_bytes(
        history,
        limit_seconds=limit,
        steps_left=spec.total_steps - (latest.step if latest else 0),
        earlier=(0, guess) if guess is not None else None,
    )
    reserve = 0.0
    started: int | None = None  # the size of the checkpoint the segment starts from
    kaggle = spec.kaggle
    if kaggle is not None and (kaggle.self_chain or kaggle.kernel_transport):
        sizes = [past.checkpoint_bytes for past in history if past.checkpoint_bytes is not None]
        started = sizes[-1] if sizes else guess
        reserve = publish_seconds(
            history,
            limit_seconds=limit,
            size=size,
            reserve_seconds=kaggle.chain_reserve_seconds,
            keep_reserve=kaggle.self_chain,
        )
    learned = learn_estimates(history, upload_floor=reserve, checkpoint_bytes=size)
    estimates = replace(learned, checkpoint_bytes=started)
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
        resume_path=RESUME_PATH if plan.resume else None,
        expect=plan.resume,
        nproc=spec.nproc,
        watchdog=WatchdogPolicy(
            hang_multiple=spec.session.watchdog.hang_multiple,
            hang_floor_seconds=spec.session.watchdog.hang_floor_seconds,
            divergence_steps=spec.session.watchdog.divergence_steps,
        ),
    )
