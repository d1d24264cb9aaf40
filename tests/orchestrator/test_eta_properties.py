"""Properties of the ETA (orchestrator/eta.py), over generated step times, sessions and quota."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import assume, given
from hypothesis import strategies as st

from orchestrator.eta import MAX_SESSIONS, EtaInputs, QuotaPlan, estimate_finish, steps_in

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)

step = st.floats(min_value=0.01, max_value=600.0)
overhead = st.floats(min_value=0.0, max_value=1800.0)
session = st.floats(min_value=60.0, max_value=12 * 3600.0)
idle = st.floats(min_value=0.0, max_value=600.0)
remaining = st.integers(min_value=0, max_value=100_000)
current_left = st.one_of(st.none(), st.floats(min_value=0.0, max_value=12 * 3600.0))
quotas = st.one_of(
    st.none(),
    st.builds(
        QuotaPlan,
        seconds_left=st.floats(min_value=0.0, max_value=30 * 3600.0),
        refresh_at=st.one_of(
            st.none(), st.integers(0, 7 * 86400).map(lambda s: NOW + timedelta(seconds=s))
        ),
        allowance_seconds=st.floats(min_value=0.0, max_value=30 * 3600.0),
    ),
)
inputs = st.builds(
    EtaInputs,
    now=st.just(NOW),
    remaining_steps=remaining,
    step_seconds=step,
    session_seconds=session,
    overhead_seconds=overhead,
    idle_seconds=idle,
    current_session_left=current_left,
    quota=quotas,
)


@given(plan=inputs)
def test_an_eta_never_promises_the_steps_sooner_than_they_take(plan: EtaInputs) -> None:
    eta = estimate_finish(plan)
    assume(eta is not None)
    assert eta is not None
    took = (eta.finish_at - plan.now).total_seconds()
    assert took >= plan.remaining_steps * plan.step_seconds - 1e-6 * max(1.0, took)
    in_current = (
        steps_in(plan.current_session_left, plan.step_seconds)
        if plan.current_session_left is not None
        else 0
    )
    if plan.remaining_steps > in_current:
        # Every further session pays its overhead once, and holds at most its share of steps.
        per_session = steps_in(plan.session_seconds - plan.overhead_seconds, plan.step_seconds)
        assert eta.more_sessions >= math.ceil((plan.remaining_steps - in_current) / per_session)
    else:
        assert eta.more_sessions == 0
    quota = plan.quota
    if (
        quota is not None
        and eta.more_sessions
        and quota.seconds_left < plan.overhead_seconds + plan.step_seconds
    ):
        # Too little quota left for one more session: the plan waits for the refresh.
        assert quota.refresh_at is not None
        assert eta.quota_waits >= 1
        assert eta.finish_at > quota.refresh_at


@given(plan=inputs, more=st.integers(min_value=1, max_value=10_000))
def test_more_steps_to_go_never_finish_sooner(plan: EtaInputs, more: int) -> None:
    sooner = estimate_finish(plan)
    later = estimate_finish(replace(plan, remaining_steps=plan.remaining_steps + more))
    assume(sooner is not None and later is not None)
    assert sooner is not None
    assert later is not None
    assert later.finish_at >= sooner.finish_at
    assert later.more_sessions >= sooner.more_sessions


@given(plan=inputs)
def test_quota_without_a_limit_changes_nothing(plan: EtaInputs) -> None:
    """Quota that never runs short plans like no quota at all, and waits for no refresh."""
    plenty = QuotaPlan(seconds_left=math.inf, refresh_at=None, allowance_seconds=math.inf)
    free = estimate_finish(replace(plan, quota=None))
    bounded = estimate_finish(replace(plan, quota=plenty))
    assert (free is None) == (bounded is None)
    if free is not None and bounded is not None:
        assert (bounded.finish_at, bounded.more_sessions, bounded.quota_waits) == (
            free.finish_at,
            free.more_sessions,
            0,
        )


@given(plan=inputs)
def test_an_eta_is_given_whenever_a_session_holds_a_step(plan: EtaInputs) -> None:
    """Without quota, any job whose sessions hold at least one step after their overhead gets an
    ETA, however short its steps (a 10 ms step included), unless it needs more than MAX_SESSIONS
    sessions (no plan at all)."""
    per_session = steps_in(plan.session_seconds - plan.overhead_seconds, plan.step_seconds)
    if per_session >= 1 and plan.remaining_steps < per_session * (MAX_SESSIONS - 1):
        assert estimate_finish(replace(plan, quota=None)) is not None


@given(plan=inputs, left=st.floats(min_value=0.0, max_value=12 * 3600.0))
def test_steps_the_running_session_holds_finish_in_it_with_no_more_sessions(
    plan: EtaInputs, left: float
) -> None:
    """Exactly as many steps to go as the running session still holds: they finish in it."""
    fits = steps_in(left, plan.step_seconds)
    exact = replace(plan, current_session_left=left, remaining_steps=fits)
    eta = estimate_finish(exact)
    assert eta is not None
    assert eta.more_sessions == 0
    assert eta.finish_at == plan.now + timedelta(seconds=fits * plan.step_seconds)
