"""The deadline margin of a segment that publishes its own checkpoint (issue 18): a reserve, at
most a share of the session, until a segment has measured publishing; then the bytes this segment
will write over the rate earlier segments published at."""

from __future__ import annotations

import pytest

from orchestrator.planner import plan_next_segment
from orchestrator.spec import JobSpec
from tests.factories import kaggle_spec
from worker.boundary.contract import CheckpointRef
from worker.boundary.planning import ESTIMATE_PADDING, MAX_RESERVE_SHARE, PastSegment

MB = 10**6


def _spec(limit: float = 600.0, total_steps: int = 500, **kaggle: object) -> JobSpec:
    return JobSpec.model_validate(
        kaggle_spec(
            {"enable_internet": True, "chain_reserve_seconds": 90.0, **kaggle},
            total_steps=total_steps,
            session={"limit_seconds": limit},
        )
    )


def _published(
    upload: float, size: int | None = None, step: int | None = None, step_seconds: float = 0.1
) -> PastSegment:
    return PastSegment(
        save_seconds=1.0,
        upload_seconds=upload,
        worker_seconds=10.0,
        session_seconds=12.0,
        step_seconds=step_seconds,
        checkpoint_bytes=size,
        end_step=step,
    )


def test_the_reserve_holds_until_publishing_is_measured_then_the_measure_does() -> None:
    latest = CheckpointRef("j", 0, 10)
    first = plan_next_segment(_spec(), 0, None, [])
    assert first.estimates.upload_seconds == 90.0
    # A fallback segment (nothing published, upload 0) measured nothing: the reserve stays.
    fallback = plan_next_segment(_spec(), 1, latest, [_published(0.0)])
    assert fallback.estimates.upload_seconds == 90.0
    measured = plan_next_segment(_spec(), 2, latest, [_published(0.0), _published(4.0)])
    assert measured.estimates.upload_seconds == 4.0 * ESTIMATE_PADDING


def test_a_short_session_keeps_only_a_share_of_itself_in_reserve() -> None:
    """120 s of reserve in a 60 s session left nothing to train; a third of it is kept."""
    plan = plan_next_segment(_spec(limit=60.0, chain_reserve_seconds=120.0), 0, None, [])
    assert plan.estimates.upload_seconds == pytest.approx(60.0 * MAX_RESERVE_SHARE)
    chained = _spec(limit=60.0, chain_reserve_seconds=120.0, self_chain=True)
    assert plan_next_segment(chained, 0, None, []).estimates.upload_seconds == pytest.approx(20.0)


def test_a_growing_checkpoint_gets_its_size_over_the_measured_rate() -> None:
    """100 MB at step 10 published in 4 s, 200 MB at step 20 in 8 s (25 MB/s): the next 10
    steps end near 300 MB, 15 s at the rate padded to 20 MB/s, where padding the last time
    measured would have kept 10 s."""
    history = [_published(4.0, 100 * MB, 10), _published(8.0, 200 * MB, 20)]
    plan = plan_next_segment(_spec(total_steps=30), 2, CheckpointRef("j", 1, 20), history)
    assert plan.estimates.upload_seconds == pytest.approx(300 * MB / (25 * MB / ESTIMATE_PADDING))
    assert plan.estimates.upload_seconds > 8.0 * ESTIMATE_PADDING
    # Only as many steps as fit the session count: 3 s steps in a 60 s session, 20 of them.
    slow = [_published(4.0, 100 * MB, 10, 3.0), _published(8.0, 200 * MB, 20, 3.0)]
    short = plan_next_segment(_spec(limit=60.0, total_steps=500), 2, None, slow)
    assert short.estimates.upload_seconds == pytest.approx(400 * MB / (20 * MB))


def test_the_first_growth_is_measured_from_the_size_predicted_at_step_0() -> None:
    """kaggle.checkpoint_bytes (or the memory planner's size) stands for step 0: a first
    commit of 100 MB at step 10 from 50 MB predicted grows 5 MB a step."""
    spec = _spec(total_steps=20, checkpoint_bytes=50 * MB)
    plan = plan_next_segment(spec, 1, CheckpointRef("j", 0, 10), [_published(4.0, 100 * MB, 10)])
    assert plan.estimates.upload_seconds == pytest.approx(150 * MB / (20 * MB))
    # Without a prediction, one size shows no growth: the latest size at the measured rate.
    plain = plan_next_segment(_spec(total_steps=20), 1, None, [_published(4.0, 100 * MB, 10)])
    assert plain.estimates.upload_seconds == pytest.approx(4.0 * ESTIMATE_PADDING)


def test_a_shrinking_checkpoint_keeps_the_time_measured() -> None:
    history = [_published(8.0, 200 * MB, 10), _published(8.0, 100 * MB, 20)]
    plan = plan_next_segment(_spec(), 2, CheckpointRef("j", 1, 20), history)
    assert plan.estimates.upload_seconds == pytest.approx(8.0 * ESTIMATE_PADDING)


def test_without_the_in_kernel_transport_nothing_is_reserved() -> None:
    plan = plan_next_segment(_spec(transport="orchestrator"), 0, None, [])
    assert plan.estimates.upload_seconds == 0.0
