"""Segment planning: start step, limit, expected checkpoint and learned estimates."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.planner import (
    SegmentPlan,
    build_segment_spec,
    minimum_session_seconds,
    plan_next_segment,
    too_short_for_startup,
)
from orchestrator.spec import MIN_SESSION_SECONDS, JobSpec
from tests.factories import job_spec, kaggle_spec
from worker.boundary.contract import CheckpointRef, Estimates, MarginPolicy, SegmentSpec
from worker.boundary.planning import ESTIMATE_PADDING, PastSegment, learn_estimates

SPEC = JobSpec.model_validate(job_spec(session={"limit_seconds": 600}))


def _past(save: float, *, step: float | None = 0.1, session: float | None = 100.0) -> PastSegment:
    return PastSegment(
        save_seconds=save,
        upload_seconds=save / 2,
        worker_seconds=98.0,
        session_seconds=session,
        step_seconds=step,
    )


def test_first_segment_starts_from_scratch_with_no_estimates() -> None:
    plan = plan_next_segment(SPEC, 0, None, [])
    assert (plan.index, plan.start_step, plan.limit_seconds, plan.resume) == (0, 0, 600, None)
    assert plan.estimates == Estimates()
    segment = build_segment_spec("j1", SPEC, plan)
    assert (segment.resume_path, segment.expect) == (None, None)


def test_next_segment_resumes_from_and_expects_the_latest_checkpoint() -> None:
    plan = plan_next_segment(SPEC, 3, CheckpointRef("j1", segment_index=2, step=120), [_past(4.0)])
    segment = build_segment_spec("j1", SPEC, plan)
    assert plan.start_step == 120
    assert segment.expect == CheckpointRef("j1", 2, 120)
    assert segment.resume_path == "input/checkpoint"
    assert (segment.total_steps, segment.seed, segment.trainer) == (50, 7, SPEC.trainer)


def test_estimates_take_the_worst_recent_cost_padded() -> None:
    history = [_past(100.0), _past(2.0), _past(5.0, step=0.3), _past(3.0, step=0.2)]
    learned = learn_estimates(history)
    # Only the last three count: the 100 s save four segments ago is forgotten.
    assert learned.save_seconds == pytest.approx(5.0 * ESTIMATE_PADDING)
    assert learned.upload_seconds == pytest.approx(2.5 * ESTIMATE_PADDING)
    assert learned.exit_seconds == pytest.approx(2.0 * ESTIMATE_PADDING)
    assert learned.step_seconds == 0.2


def test_a_growing_checkpoint_keeps_save_time_for_the_size_it_will_reach() -> None:
    """Two segments saved 100 MB then 200 MB in 1 s and 2 s (100 kB a step, 1,000 steps each):
    a 600 s session at 0.1 s a step takes up to 6,000 more steps, so its checkpoint reaches
    800 MB and its save 8 s at the measured rate, padded; not the 2 s the last one took,
    padded, which would run the commit past the deadline."""
    history = [
        PastSegment(1.0, 0.0, 98.0, 100.0, 0.1, checkpoint_bytes=100_000_000, end_step=1000),
        PastSegment(2.0, 0.0, 98.0, 100.0, 0.1, checkpoint_bytes=200_000_000, end_step=2000),
    ]
    spec = JobSpec.model_validate(job_spec(total_steps=100_000, session={"limit_seconds": 600}))
    plan = plan_next_segment(spec, 2, CheckpointRef("j1", 1, 2000), history)
    assert plan.estimates.save_seconds == pytest.approx(8.0 * ESTIMATE_PADDING)
    # A shrinking checkpoint keeps the slowest recent save: it is never predicted to shrink.
    shrunk = [history[1], replace(history[0], end_step=3000)]
    plan = plan_next_segment(spec, 2, CheckpointRef("j1", 1, 3000), shrunk)
    assert plan.estimates.save_seconds == pytest.approx(2.0 * ESTIMATE_PADDING)


def test_quota_caps_the_session_limit() -> None:
    assert plan_next_segment(SPEC, 0, None, [], quota_seconds=300).limit_seconds == 300
    assert plan_next_segment(SPEC, 0, None, [], quota_seconds=9000).limit_seconds == 600


def test_a_session_must_be_at_least_twice_its_fixed_costs() -> None:
    assert minimum_session_seconds([]) == MIN_SESSION_SECONDS
    booting = PastSegment(
        save_seconds=1.0,
        upload_seconds=0.0,
        worker_seconds=7.0,
        session_seconds=7.5,
        step_seconds=0.1,
        setup_seconds=3.5,
    )
    # 3.5 s start-up and load + 1 s save + 0.5 s exit = 5 s of fixed cost per session.
    assert booting.fixed_seconds == pytest.approx(5.0)
    assert minimum_session_seconds([booting]) == pytest.approx(10.0)


def test_the_segment_carries_the_jobs_rank_count() -> None:
    spec = JobSpec.model_validate(job_spec(nproc=2))
    segment = build_segment_spec("j1", spec, plan_next_segment(spec, 0, None, []))
    assert segment.nproc == 2
    assert build_segment_spec("j1", SPEC, plan_next_segment(SPEC, 0, None, [])).nproc == 1


@pytest.mark.parametrize("nproc", [0, 9])
def test_rank_count_is_one_to_eight(nproc: int) -> None:
    with pytest.raises(ValueError, match="nproc"):
        JobSpec.model_validate(job_spec(nproc=nproc))


def test_one_slow_start_up_does_not_raise_the_minimum_session() -> None:
    def past(setup: float) -> PastSegment:
        return PastSegment(
            save_seconds=0.0,
            upload_seconds=0.0,
            worker_seconds=10.0,
            session_seconds=10.0,
            step_seconds=0.1,
            setup_seconds=setup,
        )

    # A busy host once took 14 s to start: the week's last 12 s session still runs.
    assert minimum_session_seconds([past(5.0), past(14.0), past(5.5)]) == pytest.approx(11.0)
    assert minimum_session_seconds([past(14.0), past(15.0), past(5.0)]) == pytest.approx(28.0)
    assert minimum_session_seconds([past(5.0), past(14.0)]) == pytest.approx(10.0)


def test_the_segment_spec_carries_the_plan_and_the_jobs_settings_whole() -> None:
    spec = JobSpec.model_validate(
        job_spec(
            config={"lr": 0.5},
            total_steps=90,
            seed=3,
            session={"limit_seconds": 600, "margin": {"k_steps": 3.0, "safety_seconds": 4.0}},
        )
    )
    estimates = Estimates(save_seconds=6.0, upload_seconds=2.0, exit_seconds=1.0, step_seconds=0.4)
    plan = SegmentPlan(4, 60, 300.0, estimates, CheckpointRef("j9", 3, 60))
    assert build_segment_spec("j9", spec, plan) == SegmentSpec(
        job_id="j9",
        segment_index=4,
        trainer=spec.trainer,
        config={"lr": 0.5},
        total_steps=90,
        limit_seconds=300.0,
        seed=3,
        margin=MarginPolicy(k_steps=3.0, safety_seconds=4.0),
        estimates=estimates,
        resume_path="input/checkpoint",
        expect=CheckpointRef("j9", 3, 60),
        nproc=1,
    )


def test_estimates_without_session_or_step_times_still_learn_save_and_upload() -> None:
    learned = learn_estimates([_past(4.0, step=None, session=None)])
    assert learned == Estimates(
        save_seconds=4.0 * ESTIMATE_PADDING,
        upload_seconds=2.0 * ESTIMATE_PADDING,
        exit_seconds=0.0,
        step_seconds=None,
    )
    # A session the backend timed shorter than the worker's own clock has no exit cost.
    assert learn_estimates([_past(4.0, session=90.0)]).exit_seconds == 0.0
    assert learn_estimates([_past(4.0, session=98.0)]).exit_seconds == 0.0


def test_a_self_chained_segment_keeps_time_to_publish_and_push_its_successor() -> None:
    spec = JobSpec.model_validate(
        kaggle_spec(
            {"self_chain": True, "enable_internet": True, "chain_reserve_seconds": 30},
            session={"limit_seconds": 600},
        )
    )
    first = plan_next_segment(spec, 0, None, [])
    assert first.estimates == Estimates(upload_seconds=30.0)
    # A measured upload longer than the reserve wins.
    slow = [_past(100.0)]  # upload 50 s
    assert plan_next_segment(spec, 1, CheckpointRef("j1", 0, 10), slow).estimates == replace(
        learn_estimates(slow), upload_seconds=50.0 * ESTIMATE_PADDING
    )
    plain = JobSpec.model_validate(kaggle_spec())
    assert plan_next_segment(plain, 0, None, []).estimates == Estimates()


def test_no_session_is_launched_shorter_than_its_measured_start_up_and_load() -> None:
    """Sessions killed at their limit before their first step left empty logs, one after
    another: once start-up and load were measured, a shorter limit fails the job at once."""

    def started_in(setup: float) -> PastSegment:
        return PastSegment(
            save_seconds=2.0,
            upload_seconds=0.0,
            worker_seconds=setup + 10.0,
            session_seconds=None,
            step_seconds=1.0,
            setup_seconds=setup,
        )

    # The fastest of the last three start-ups: one slowed by a busy host does not count.
    history = [started_in(40.0), started_in(20.0), started_in(25.0), started_in(90.0)]
    assert too_short_for_startup(600.0, history) is None
    assert too_short_for_startup(20.0, history) is None
    assert too_short_for_startup(15.0, history) == (
        "sessions of 15 s are shorter than this job's measured start-up and load (20 s): "
        "raise session.limit_seconds"
    )
    assert too_short_for_startup(15.0, []) is None  # nothing measured yet
