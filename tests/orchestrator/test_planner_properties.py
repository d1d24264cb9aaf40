"""Properties of segment planning and quota sizing (orchestrator/planner.py), over generated
specs, histories and quota."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.planner import build_segment_spec, minimum_session_seconds, plan_next_segment
from orchestrator.spec import MIN_SESSION_SECONDS, JobSpec
from tests.factories import job_spec, kaggle_spec
from worker.boundary.contract import CheckpointRef, SegmentResult, Timings
from worker.boundary.planning import (
    ESTIMATE_PADDING,
    ESTIMATE_WINDOW,
    MAX_RESERVE_SHARE,
    PastSegment,
    learn_estimates,
    next_checkpoint_bytes,
    publish_seconds,
    successor_spec,
)

cost = st.floats(min_value=0.0, max_value=3600.0, allow_nan=False)
past_segments = st.builds(
    PastSegment,
    save_seconds=cost,
    upload_seconds=cost,
    worker_seconds=cost,
    session_seconds=st.one_of(st.none(), cost),
    step_seconds=st.one_of(st.none(), st.floats(min_value=1e-3, max_value=600.0)),
    setup_seconds=cost,
    checkpoint_bytes=st.one_of(st.none(), st.integers(0, 10**11)),
    end_step=st.one_of(st.none(), st.integers(0, 10**6)),
)
histories = st.lists(past_segments, max_size=8)
checkpoints = st.one_of(
    st.none(), st.builds(CheckpointRef, st.just("job"), st.integers(0, 1000), st.integers(0, 10**6))
)
quotas = st.one_of(st.none(), st.floats(min_value=0.0, max_value=40 * 3600.0))


@st.composite
def specs(draw: st.DrawFn) -> JobSpec:
    limit = draw(st.floats(min_value=MIN_SESSION_SECONDS, max_value=12 * 3600.0))
    if draw(st.booleans()):
        kaggle = {
            "self_chain": draw(st.booleans()),
            "enable_internet": True,
            "chain_reserve_seconds": draw(st.floats(min_value=0.0, max_value=3600.0)),
        }
        raw = kaggle_spec(kaggle, session={"limit_seconds": limit})
    else:
        raw = job_spec(session={"limit_seconds": limit})
    return JobSpec.model_validate(raw)


@given(spec=specs(), latest=checkpoints, history=histories, quota=quotas)
def test_no_plan_gives_a_session_longer_than_its_limit_or_the_quota_left(
    spec: JobSpec, latest: CheckpointRef | None, history: list[PastSegment], quota: float | None
) -> None:
    """The quota handed in is already what Kaggle grants less the job's reserve (the backend's
    `quota`), so no session runs into the reserve either."""
    plan = plan_next_segment(spec, 3, latest, history, quota)
    assert plan.limit_seconds <= spec.session.limit_seconds
    if quota is not None:
        assert plan.limit_seconds <= quota
    else:
        assert plan.limit_seconds == spec.session.limit_seconds


@given(spec=specs(), latest=checkpoints, history=histories, quota=quotas)
def test_a_plan_resumes_from_and_expects_exactly_the_latest_checkpoint(
    spec: JobSpec, latest: CheckpointRef | None, history: list[PastSegment], quota: float | None
) -> None:
    segment = build_segment_spec("job", spec, plan_next_segment(spec, 4, latest, history, quota))
    assert segment.segment_index == 4
    if latest is None:
        assert (segment.resume_path, segment.expect) == (None, None)
    else:
        assert segment.resume_path is not None
        assert segment.expect is not None
        assert (segment.expect.job_id, segment.expect.segment_index, segment.expect.step) == (
            "job",
            latest.segment_index,
            latest.step,
        )


@given(history=st.lists(past_segments, min_size=1, max_size=8))
def test_learned_costs_are_never_below_any_recent_measurement(history: list[PastSegment]) -> None:
    learned = learn_estimates(history)
    recent = history[-ESTIMATE_WINDOW:]
    assert learned.save_seconds is not None
    assert all(learned.save_seconds >= past.save_seconds for past in recent)
    assert all(learned.upload_seconds >= past.upload_seconds for past in recent)
    for past in recent:
        if past.session_seconds is not None:
            assert learned.exit_seconds >= past.session_seconds - past.worker_seconds


@given(
    history=st.lists(past_segments, min_size=1, max_size=8),
    size=st.one_of(st.none(), st.integers(0, 10**11)),
)
def test_the_save_kept_covers_the_next_checkpoint_at_the_slowest_recent_save_rate(
    history: list[PastSegment], size: int | None
) -> None:
    """A checkpoint that grows takes longer to write than the smaller one measured before it:
    the save kept is never less than the next checkpoint's size takes at any recent segment's
    save rate, padded, nor less than any recent save."""
    learned = learn_estimates(history, checkpoint_bytes=size)
    assert learned.save_seconds is not None
    recent = history[-ESTIMATE_WINDOW:]
    assert all(learned.save_seconds >= past.save_seconds for past in recent)
    for past in recent:
        if size and past.checkpoint_bytes and past.save_seconds > 0:
            rate = past.checkpoint_bytes / past.save_seconds
            assert learned.save_seconds >= size / rate * ESTIMATE_PADDING * (1 - 1e-9)


@given(spec=specs(), latest=checkpoints, history=histories, quota=quotas)
def test_a_self_chained_segment_always_keeps_its_chain_reserve(
    spec: JobSpec, latest: CheckpointRef | None, history: list[PastSegment], quota: float | None
) -> None:
    plan = plan_next_segment(spec, 1, latest, history, quota)
    if spec.kaggle is not None and spec.kaggle.self_chain:
        reserve = min(spec.kaggle.chain_reserve_seconds, MAX_RESERVE_SHARE * plan.limit_seconds)
        assert plan.estimates.upload_seconds >= reserve
    assert plan.estimates.upload_seconds >= learn_estimates(history).upload_seconds


@given(history=histories)
def test_a_session_worth_launching_is_at_least_half_training(history: list[PastSegment]) -> None:
    """The minimum session is at least twice the fixed cost of a typical recent session (the
    lower median of the last few), so at least half of it trains; never under the floor."""
    minimum = minimum_session_seconds(history)
    assert minimum >= MIN_SESSION_SECONDS
    recent = sorted(past.fixed_seconds for past in history[-ESTIMATE_WINDOW:])
    if recent:
        assert minimum >= 2 * recent[(len(recent) - 1) // 2]
        assert minimum <= max(MIN_SESSION_SECONDS, 2 * recent[-1])


@given(
    spec=specs(),
    latest=checkpoints,
    history=histories,
    save=cost,
    upload=cost,
    startup=cost,
    total=cost,
    step=st.one_of(st.none(), st.floats(min_value=1e-3, max_value=600.0)),
    end_step=st.integers(0, 10**6),
)
def test_a_successor_planned_in_the_kernel_resumes_from_what_it_left_and_keeps_its_reserves(
    spec: JobSpec,
    latest: CheckpointRef | None,
    history: list[PastSegment],
    save: float,
    upload: float,
    startup: float,
    total: float,
    step: float | None,
    end_step: int,
) -> None:
    """Successor sizing (self-chaining): the next segment resumes from and expects exactly the
    checkpoint this one committed, and its costs are never below what this kernel measured nor
    below the time the orchestrator reserved for publishing, pushing and exiting."""
    segment = build_segment_spec("job", spec, plan_next_segment(spec, 2, latest, history))
    result = SegmentResult(
        job_id="job",
        segment_index=2,
        outcome="deadline",
        start_step=0,
        end_step=end_step,
        limit_seconds=segment.limit_seconds,
        timings=Timings(startup=startup, save=save, upload=upload, total=total),
        step_time_ema=step,
    )
    left = CheckpointRef("job", 2, end_step)
    successor = successor_spec(segment, result, left, upload)
    assert (successor.segment_index, successor.expect) == (3, left)
    assert successor.resume_path is not None
    assert successor.estimates.save_seconds is not None
    assert successor.estimates.save_seconds >= save
    assert successor.estimates.upload_seconds >= max(upload, segment.estimates.upload_seconds)
    assert successor.estimates.exit_seconds >= segment.estimates.exit_seconds
    assert successor.estimates.step_seconds == step
    assert (successor.limit_seconds, successor.margin) == (segment.limit_seconds, segment.margin)


limits = st.floats(min_value=MIN_SESSION_SECONDS, max_value=12 * 3600.0)


@given(
    history=histories,
    limit=limits,
    steps_left=st.integers(0, 10**6),
    reserve=cost,
    guess=st.one_of(st.none(), st.tuples(st.integers(0, 10**6), st.integers(0, 10**11))),
    keep=st.booleans(),
)
def test_publishing_time_covers_the_latest_checkpoint_at_every_recent_rate_and_a_guess_is_capped(
    history: list[PastSegment],
    limit: float,
    steps_left: int,
    reserve: float,
    guess: tuple[int, int] | None,
    keep: bool,
) -> None:
    """Measured: never less than the latest checkpoint takes at the slowest recent rate (the
    checkpoint is predicted never to shrink). Unmeasured: the reserve, never over a third of the
    session."""
    size = next_checkpoint_bytes(history, limit_seconds=limit, steps_left=steps_left, earlier=guess)
    seconds = publish_seconds(
        history, limit_seconds=limit, size=size, reserve_seconds=reserve, keep_reserve=keep
    )
    rates = [rate for past in history[-ESTIMATE_WINDOW:] if (rate := past.publish_rate)]
    if not rates:
        assert seconds <= MAX_RESERVE_SHARE * limit
        if keep or not any(past.upload_seconds > 0 for past in history):
            assert seconds == min(reserve, MAX_RESERVE_SHARE * limit)
        return
    sizes = [
        p.checkpoint_bytes
        for p in history
        if p.checkpoint_bytes is not None and p.end_step is not None
    ]
    if sizes:
        assert all(seconds >= sizes[-1] / rate * (1 - 1e-9) for rate in rates)
    if keep:
        assert seconds >= min(reserve, MAX_RESERVE_SHARE * limit)
