"""ETA arithmetic: sessions, overheads, quota left and its refreshes, on fixed times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from orchestrator.eta import EtaInputs, QuotaPlan, estimate_finish

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
