"""The deadline margin of a segment that publishes its own checkpoint (issue 18): the reserve
until a segment has measured publishing, then the measured time, padded."""

from __future__ import annotations

from orchestrator.planner import plan_next_segment
from orchestrator.spec import JobSpec
from tests.factories import kaggle_spec
from worker.boundary.contract import CheckpointRef
from worker.boundary.planning import ESTIMATE_PADDING, PastSegment


def _spec(**kaggle: object) -> JobSpec:
    return JobSpec.model_validate(
        kaggle_spec({"enable_internet": True, "chain_reserve_seconds": 90.0, **kaggle})
    )


def _published(upload: float) -> PastSegment:
    return PastSegment(
        save_seconds=1.0,
        upload_seconds=upload,
        worker_seconds=10.0,
        session_seconds=12.0,
        step_seconds=0.1,
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


def test_without_the_in_kernel_transport_nothing_is_reserved() -> None:
    plan = plan_next_segment(_spec(transport="orchestrator"), 0, None, [])
    assert plan.estimates.upload_seconds == 0.0
