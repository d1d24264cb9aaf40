"""ETA arithmetic: sessions, overheads, quota left and its refreshes, on fixed times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.eta import (
    PRIOR_SPREAD,
    EtaInputs,
    QuotaPlan,
    SessionRecord,
    estimate_finish,
    estimate_with_range,
    relative_spread,
    typical_fixed_seconds,
    typical_step_seconds,
)

NOW = datetime(2026, 11, 19, 8, 0, tzinfo=UTC)  # a Thursday
HOUR = 3600.0


def inputs(**overrides: object) -> EtaInputs:
    values: dict[str, object] = {
        "now": NOW,
        "remaining_steps": 1000,
        "step_seconds": 36.0,  # 100 steps an hour
        "session_seconds": 12 * HOUR,
        "overhead_seconds": 0.5 * HOUR,
    }
    values.update(overrides)
    return EtaInputs(**values)  # type: ignore[arg-type]


def test_a_job_that_fits_in_the_running_session_ends_there() -> None:
    eta = estimate_finish(inputs(remaining_steps=150, current_session_left=3 * HOUR))
    assert eta is not None
    assert eta.finish_at == NOW + timedelta(hours=1.5)
    assert eta.more_sessions == 0


def test_steps_beyond_the_running_session_need_new_sessions_with_their_overheads() -> None:
    # 200 steps now (2 h left), then 800: one 11.5 h-capable session, 0.5 h overhead + 8 h.
    eta = estimate_finish(
        inputs(current_session_left=2 * HOUR, idle_seconds=0.25 * HOUR, remaining_steps=1000)
    )
    assert eta is not None
    assert eta.more_sessions == 1
    assert eta.finish_at == NOW + timedelta(hours=2 + 0.25 + 0.5 + 8)


def test_a_partial_last_session_is_only_as_long_as_its_steps() -> None:
    # 1150 steps per full session (11.5 h of steps); 2500 steps: two full, then 200 steps.
    eta = estimate_finish(inputs(remaining_steps=2500))
    assert eta is not None
    assert eta.more_sessions == 3
    assert eta.finish_at == NOW + timedelta(hours=12 + 12 + 0.5 + 2)


def test_zero_quota_left_waits_for_the_refresh() -> None:
    refresh = NOW + timedelta(days=2)
    quota = QuotaPlan(seconds_left=0, refresh_at=refresh, allowance_seconds=30 * HOUR)
    eta = estimate_finish(inputs(remaining_steps=500, quota=quota))
    assert eta is not None
    assert eta.quota_waits == 1
    assert eta.finish_at == refresh + timedelta(hours=0.5 + 5)
    assert eta.describe().startswith("done Sat 13:30 UTC at 30 h/week, 1 more session")


def test_quota_sizes_sessions_and_the_rest_runs_after_each_refresh() -> None:
    # 4 h left this week: one 4 h session (350 steps); then 30 h a week from the refresh.
    refresh = NOW + timedelta(days=1)
    quota = QuotaPlan(seconds_left=4 * HOUR, refresh_at=refresh, allowance_seconds=30 * HOUR)
    eta = estimate_finish(inputs(remaining_steps=350 + 1150 + 1150 + 1150, quota=quota))
    assert eta is not None
    # After the refresh: two 12 h sessions (24 h), then 6 h left, less than a third 12 h one:
    # a 6 h session (550 steps), and the last 600 steps wait for the next refresh.
    assert eta.quota_waits == 2
    assert eta.more_sessions == 5
    assert eta.finish_at == refresh + timedelta(days=7, hours=0.5 + 6)


def test_refresh_while_the_sessions_run_restores_the_allowance() -> None:
    refresh = NOW + timedelta(hours=12)
    quota = QuotaPlan(seconds_left=12 * HOUR, refresh_at=refresh, allowance_seconds=30 * HOUR)
    eta = estimate_finish(inputs(remaining_steps=2300, quota=quota))
    assert eta is not None
    assert eta.quota_waits == 0
    assert eta.finish_at == NOW + timedelta(hours=24)


def test_no_estimate_without_a_step_time_or_when_no_step_fits() -> None:
    assert estimate_finish(inputs(step_seconds=0)) is None
    assert estimate_finish(inputs(session_seconds=0.5 * HOUR + 10)) is None


def test_no_estimate_when_the_quota_never_refreshes() -> None:
    quota = QuotaPlan(seconds_left=0, refresh_at=None, allowance_seconds=30 * HOUR)
    assert estimate_finish(inputs(quota=quota)) is None


def test_a_finished_count_is_done_now() -> None:
    eta = estimate_finish(inputs(remaining_steps=0))
    assert eta is not None
    assert (eta.finish_at, eta.more_sessions) == (NOW, 0)


def test_a_quota_too_small_for_one_step_waits_and_counts_no_session_that_trains_nothing() -> None:
    # Half a step more than the overheads left this week: no step fits, so the plan waits for
    # the refresh and counts only the one session that trains the 100 steps after it.
    refresh = NOW + timedelta(days=1)
    quota = QuotaPlan(seconds_left=0.5 * HOUR + 18, refresh_at=refresh, allowance_seconds=30 * HOUR)
    eta = estimate_finish(inputs(remaining_steps=100, quota=quota))
    assert eta is not None
    assert (eta.more_sessions, eta.quota_waits) == (1, 1)
    assert eta.finish_at == refresh + timedelta(hours=0.5 + 1)


def test_after_a_refresh_passes_while_sessions_run_the_next_one_is_a_period_later() -> None:
    # 12 h left, the refresh at the end of the first 12 h session: 30 h more, spent on two 12 h
    # sessions and a 6 h one (1150 + 1150 + 550 steps). The last 100 steps wait for the refresh
    # a week after the first, and no earlier.
    refresh = NOW + timedelta(hours=12)
    quota = QuotaPlan(seconds_left=12 * HOUR, refresh_at=refresh, allowance_seconds=30 * HOUR)
    eta = estimate_finish(inputs(remaining_steps=1150 * 3 + 550 + 100, quota=quota))
    assert eta is not None
    assert (eta.more_sessions, eta.quota_waits) == (5, 1)
    assert eta.finish_at == refresh + timedelta(days=7, hours=0.5 + 1)


def test_sessions_to_come_get_the_median_step_time_so_one_odd_session_barely_counts() -> None:
    history = [SessionRecord(300, 300.0, 40.0), SessionRecord(1, 60.0, 40.0)]
    assert typical_step_seconds(history) == 1.0
    slow = [SessionRecord(300, 300.0, 40.0), SessionRecord(200, 400.0, 40.0)]
    assert typical_step_seconds(slow) == 1.0
    # The running session's steps weigh as much as the finished ones'.
    assert typical_step_seconds(slow, 400, 2.0) == 2.0
    assert typical_step_seconds([SessionRecord(0, None, 40.0)]) is None


def test_one_slow_start_up_does_not_move_the_fixed_cost() -> None:
    history = [SessionRecord(100, 100.0, cost) for cost in (40.0, 42.0, 400.0)]
    assert typical_fixed_seconds(history) == 42.0
    assert typical_fixed_seconds([]) is None


def test_the_range_narrows_as_steady_sessions_accumulate() -> None:
    spreads = [relative_spread([SessionRecord(100, 100.0, 40.0)] * n) for n in range(5)]
    assert spreads[0] == PRIOR_SPREAD
    assert spreads == sorted(spreads, reverse=True)
    assert spreads[4] == pytest.approx(PRIOR_SPREAD / 5**0.5)
    # Sessions whose step times differ widen it again.
    uneven = [SessionRecord(100, 100.0, 40.0), SessionRecord(100, 200.0, 40.0)]
    assert relative_spread(uneven) > relative_spread([SessionRecord(100, 100.0, 40.0)] * 2)


def test_the_range_holds_the_estimate_and_a_short_job_is_told_in_seconds() -> None:
    eta = estimate_with_range(
        inputs(remaining_steps=100, step_seconds=1.0, overhead_seconds=30.0), 0.1
    )
    assert eta is not None
    assert eta.earliest is not None
    assert eta.latest is not None
    assert eta.earliest < eta.finish_at < eta.latest
    assert eta.finish_at == NOW + timedelta(seconds=130)
    assert eta.describe(NOW) == "done in 2 min 10 s (1 min 53 s\u20132 min 27 s), 1 more session"
    assert eta.describe().startswith("done Thu 08:02 UTC")


def test_each_session_keeps_the_deadline_margin_unused() -> None:
    plain = estimate_finish(inputs(remaining_steps=1200, overhead_seconds=0.0))
    kept = estimate_finish(
        inputs(remaining_steps=1200, overhead_seconds=0.0, stop_margin_seconds=36.0)
    )
    assert plain is not None
    assert kept is not None
    # 1200 steps are exactly one 12 h session; less the margin, one step spills into another.
    assert (plain.more_sessions, kept.more_sessions) == (1, 2)


def test_the_running_session_goes_on_at_its_own_step_time() -> None:
    eta = estimate_finish(
        inputs(remaining_steps=100, current_session_left=HOUR, current_step_seconds=30.0)
    )
    assert eta is not None
    assert (eta.finish_at, eta.more_sessions) == (NOW + timedelta(seconds=3000), 0)
