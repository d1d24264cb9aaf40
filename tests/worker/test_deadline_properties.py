"""Properties of the deadline rule (worker/deadline.py), over generated step times and costs.

The central promise: when no step takes longer than k times the rule's own estimate of the next
one, and the save, upload and exit take no longer than estimated, the commit is done by the
deadline, however the steps vary.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from worker.boundary.contract import Estimates, MarginPolicy
from worker.deadline import STEP_WINDOW, SessionBudget, must_stop_before_step

seconds = st.floats(min_value=0.0, max_value=1e4, allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)
margins = st.builds(
    MarginPolicy,
    k_steps=st.floats(min_value=1.0, max_value=4.0),
    safety_seconds=st.floats(min_value=0.0, max_value=60.0),
)
estimates = st.builds(
    Estimates,
    save_seconds=st.one_of(st.none(), st.floats(min_value=0.0, max_value=600.0)),
    upload_seconds=st.floats(min_value=0.0, max_value=600.0),
    exit_seconds=st.floats(min_value=0.0, max_value=60.0),
    step_seconds=positive,
)


@given(
    limit=st.floats(min_value=1.0, max_value=12 * 3600.0),
    margin=margins,
    learned=estimates,
    # Each step takes this share of k times the estimate the rule held when it let it start.
    shares=st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=400),
    save_share=st.floats(min_value=0.0, max_value=1.0),
)
def test_steps_no_slower_than_k_estimates_always_leave_time_to_commit(
    limit: float,
    margin: MarginPolicy,
    learned: Estimates,
    shares: list[float],
    save_share: float,
) -> None:
    budget = SessionBudget.for_session(0.0, limit, margin, learned)
    now = 0.0
    for share in shares:
        if budget.should_stop(now):
            break
        took = share * margin.k_steps * budget.step_seconds
        now += took
        budget.record_step(took)
    # Stopped (or ran out of steps to take): the save, upload and exit fit before the deadline.
    after_last_step = (
        save_share * budget.save_seconds
        + learned.upload_seconds
        + learned.exit_seconds
        + margin.safety_seconds
    )
    if budget.recent_steps:  # with no step taken, the resumed state is committed as it was
        assert now + after_last_step <= budget.deadline + 1e-6 * limit


@given(
    now=seconds,
    later=seconds,
    deadline=seconds,
    step=seconds,
    reserved=seconds,
    k=st.floats(min_value=0.0, max_value=10.0),
)
def test_once_the_rule_says_stop_it_says_stop_at_every_later_moment(
    now: float, later: float, deadline: float, step: float, reserved: float, k: float
) -> None:
    if must_stop_before_step(
        now, deadline, step_seconds=step, reserved_seconds=reserved, k_steps=k
    ):
        assert must_stop_before_step(
            now + later, deadline, step_seconds=step, reserved_seconds=reserved, k_steps=k
        )


@given(steps=st.lists(positive, min_size=1, max_size=100))
def test_one_slow_step_counts_fully_for_the_next_window_of_steps(steps: list[float]) -> None:
    """What the next step may take is never less than the slowest of the last STEP_WINDOW."""
    budget = SessionBudget(deadline=1e9)
    for index, took in enumerate(steps):
        budget.record_step(took)
        window = steps[max(0, index + 1 - STEP_WINDOW) : index + 1]
        assert budget.step_seconds >= max(window)


@given(learned=estimates, margin=margins, state_bytes=st.integers(0, 10**12))
def test_every_cost_after_the_last_step_is_kept_back(
    learned: Estimates, margin: MarginPolicy, state_bytes: int
) -> None:
    budget = SessionBudget(deadline=1e9, margin=margin, estimates=learned)
    budget.record_state_size(state_bytes)
    assert (
        budget.reserved_seconds
        >= (budget.save_seconds + learned.upload_seconds + learned.exit_seconds)
        + margin.safety_seconds
        - 1e-9
    )
    if learned.save_seconds is None:
        # No measured save: the estimate grows with the state that has to be written.
        bigger = SessionBudget(deadline=1e9, margin=margin, estimates=learned)
        bigger.record_state_size(state_bytes + 10**9)
        assert bigger.save_seconds > budget.save_seconds
