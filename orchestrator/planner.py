"""Segment planning: where the next segment starts, how long it may run, what it should expect.

Pure: the engine passes in the job's spec, its latest committed checkpoint and the history of
earlier segments; the costs those segments measured become the next segment's estimates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.spec import MIN_SESSION_SECONDS, JobSpec
from worker.boundary.contract import CheckpointRef, Estimates, MarginPolicy, SegmentSpec
from worker.boundary.paths import RESUME_PATH
from worker.boundary.planning import PastSegment, learn_estimates
from worker.boundary.planning import minimum_session_seconds as _minimum_session_seconds


@dataclass(frozen=True)
class SegmentPlan:
    index: int
    start_step: int
    limit_seconds: float
    estimates: Estimates
    resume: CheckpointRef | None


def minimum_session_seconds(history: Sequence[PastSegment]) -> float:
    """The shortest session worth launching (worker/boundary/planning.py), never below
    MIN_SESSION_SECONDS."""
    return _minimum_session_seconds(history, MIN_SESSION_SECONDS)


def plan_next_segment(
    spec: JobSpec,
    next_index: int,
    latest: CheckpointRef | None,
    history: Sequence[PastSegment],
    quota_seconds: float | None = None,
) -> SegmentPlan:
    limit = spec.session.limit_seconds
    if quota_seconds is not None:
        limit = min(limit, quota_seconds)
    # A self-chaining segment publishes and pushes before its deadline: keep time for that.
    reserve = 0.0
    if spec.kaggle is not None and spec.kaggle.self_chain:
        reserve = spec.kaggle.chain_reserve_seconds
    estimates = learn_estimates(history, upload_floor=reserve)
    return SegmentPlan(
        index=next_index,
        start_step=latest.step if latest else 0,
        limit_seconds=limit,
        estimates=estimates,
        resume=latest,
    )


def build_segment_spec(job_id: str, spec: JobSpec, plan: SegmentPlan) -> SegmentSpec:
    return SegmentSpec(
        job_id=job_id,
        segment_index=plan.index,
        trainer=spec.trainer,
        config=spec.config,
        total_steps=spec.total_steps,
        limit_seconds=plan.limit_seconds,
        seed=spec.seed,
        margin=MarginPolicy(
            k_steps=spec.session.margin.k_steps,
            safety_seconds=spec.session.margin.safety_seconds,
        ),
        estimates=plan.estimates,
        resume_path=RESUME_PATH if plan.resume else None,
        expect=plan.resume,
        nproc=spec.nproc,
    )
