"""Successor planning inside a kernel follows the orchestrator's rule (worker/boundary/planning)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.planner import build_segment_spec, plan_next_segment
from orchestrator.spec import JobSpec
from tests.factories import kaggle_spec
from worker.boundary.contract import CheckpointRef, Estimates, SegmentResult, Timings
from worker.boundary.planning import ESTIMATE_PADDING, PastSegment, successor_spec

SPEC = JobSpec.model_validate(
    kaggle_spec(
        {"self_chain": True, "enable_internet": True, "chain_reserve_seconds": 30},
        session={"limit_seconds": 600},
    )
)
GB = 10**9


def _result(save: float, ema: float | None = 0.2) -> SegmentResult:
    return SegmentResult(
        job_id="j1",
        segment_index=0,
        outcome="deadline",
        start_step=0,
        end_step=40,
        limit_seconds=600.0,
        timings=Timings(startup=1.0, load=2.0, train=500.0, save=save, total=510.0),
        step_time_ema=ema,
    )


def test_the_successor_resumes_from_the_published_checkpoint() -> None:
    first = build_segment_spec("j1", SPEC, plan_next_segment(SPEC, 0, None, []))
    resume = CheckpointRef("j1", 0, 40)
    successor = successor_spec(first, _result(save=4.0), resume, upload_seconds=8.0)
    assert (successor.segment_index, successor.expect) == (1, resume)
    assert successor.resume_path == "input/checkpoint"
    assert (successor.trainer, successor.config, successor.margin) == (
        first.trainer,
        first.config,
        first.margin,
    )


def test_a_kernel_budgets_its_successor_as_the_orchestrator_would() -> None:
    first = build_segment_spec("j1", SPEC, plan_next_segment(SPEC, 0, None, []))
    resume = CheckpointRef("j1", 0, 40)
    # A fast publish: the chain reserve the first segment was given still holds.
    fast = successor_spec(first, _result(save=4.0), resume, upload_seconds=8.0)
    measured = PastSegment(
        save_seconds=4.0,
        upload_seconds=8.0,
        worker_seconds=510.0,
        session_seconds=None,  # no one measures a kernel's exit from inside it
        step_seconds=0.2,
        setup_seconds=3.0,
    )
    by_orchestrator = plan_next_segment(SPEC, 1, resume, [measured]).estimates
    assert fast.estimates == by_orchestrator
    assert fast.estimates == Estimates(
        save_seconds=pytest.approx(4.0 * ESTIMATE_PADDING), upload_seconds=30.0, step_seconds=0.2
    )
    # A slow publish: the measured time, padded, wins over the reserve.
    slow = successor_spec(first, _result(save=4.0), resume, upload_seconds=40.0)
    assert slow.estimates.upload_seconds == pytest.approx(40.0 * ESTIMATE_PADDING)


def test_a_kernel_carries_the_exit_time_it_cannot_measure() -> None:
    first = build_segment_spec("j1", SPEC, plan_next_segment(SPEC, 0, None, []))
    carried = replace(first, estimates=Estimates(exit_seconds=6.0))
    successor = successor_spec(carried, _result(save=1.0), CheckpointRef("j1", 0, 40), 1.0)
    assert successor.estimates.exit_seconds == 6.0


def test_a_kernel_budgets_publishing_by_size_as_the_orchestrator_would() -> None:
    """One rule on both sides: 1 GB published in 50 s (20 MB/s, padded to 16 MB/s) gives the
    successor 62.5 s, whether the kernel plans it or the orchestrator does."""
    first = build_segment_spec("j1", SPEC, plan_next_segment(SPEC, 0, None, []))
    resume = CheckpointRef("j1", 0, 40)
    kernel = successor_spec(first, _result(save=4.0), resume, 50.0, checkpoint_bytes=GB)
    measured = PastSegment(
        save_seconds=4.0,
        upload_seconds=50.0,
        worker_seconds=510.0,
        session_seconds=None,
        step_seconds=0.2,
        setup_seconds=3.0,
        checkpoint_bytes=GB,
        end_step=40,
    )
    by_orchestrator = plan_next_segment(SPEC, 1, resume, [measured]).estimates
    assert kernel.estimates == by_orchestrator
    assert kernel.estimates.upload_seconds == pytest.approx(GB / (20e6 / ESTIMATE_PADDING))


def test_a_kernel_sees_its_checkpoint_grow_from_the_one_it_started_from() -> None:
    """The first segment starts from the size predicted for step 0 (50 MB), commits 100 MB at
    step 40 and publishes it in 5 s: the kernel plans 5 s more for the next 40 steps' growth,
    as the orchestrator would."""
    spec = JobSpec.model_validate(
        kaggle_spec(
            {
                "self_chain": True,
                "enable_internet": True,
                "chain_reserve_seconds": 1,
                "checkpoint_bytes": 50 * 10**6,
            },
            total_steps=80,
            session={"limit_seconds": 600},
        )
    )
    first = build_segment_spec("j1", spec, plan_next_segment(spec, 0, None, []))
    assert first.estimates.checkpoint_bytes == 50 * 10**6
    resume = CheckpointRef("j1", 0, 40)
    kernel = successor_spec(first, _result(save=4.0), resume, 5.0, checkpoint_bytes=10**8)
    measured = PastSegment(
        save_seconds=4.0,
        upload_seconds=5.0,
        worker_seconds=510.0,
        session_seconds=None,
        step_seconds=0.2,
        setup_seconds=3.0,
        checkpoint_bytes=10**8,
        end_step=40,
    )
    assert kernel.estimates == plan_next_segment(spec, 1, resume, [measured]).estimates
    # 150 MB at 20 MB/s padded to 16 MB/s.
    assert kernel.estimates.upload_seconds == pytest.approx(150e6 / (20e6 / ESTIMATE_PADDING))
