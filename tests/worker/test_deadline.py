"""The deadline rule, played on a fake clock like submitit's tests."""

import pytest

from worker.boundary.contract import Estimates, MarginPolicy
from worker.deadline import (
    SAVE_FLOOR_SECONDS,
    SessionBudget,
    estimate_save_seconds,
    must_stop_before_step,
    step_quantile,
)

MINUTE = 60.0
START = 1_000_000.0


def hour_session(**estimates: float) -> SessionBudget:
    """A 60-minute session: 60 s steps, k=2, 30 s safety, 120 s save and 60 s upload measured."""
    budget = SessionBudget.for_session(
        START,
        60 * MINUTE,
        MarginPolicy(k_steps=2.0, safety_seconds=30.0),
        Estimates(**{"save_seconds": 120.0, "upload_seconds": 60.0, **estimates}),
    )
    budget.record_step(60.0)
    return budget


@pytest.mark.parametrize(
    ("minute", "stop"),
    [(30, False), (50, False), (54, False), (55, True), (59, True)],
)
def test_hour_session_stops_only_when_two_steps_and_exit_costs_no_longer_fit(minute, stop):
    # Reserved: 2*60 step + 120 save + 60 upload + 30 safety = 330 s, so the last start is 54:30.
    assert hour_session().should_stop(START + minute * MINUTE) is stop


def test_exit_seconds_count_against_the_deadline():
    assert not hour_session().should_stop(START + 54 * MINUTE)
    assert hour_session(exit_seconds=60.0).should_stop(START + 54 * MINUTE)


def test_ema_follows_slower_steps():
    budget = hour_session()
    assert not budget.should_stop(START + 54 * MINUTE)
    for _ in range(10):
        budget.record_step(120.0)  # steps got twice as slow: now 4 min of steps are reserved
    assert budget.step_seconds == pytest.approx(120.0, rel=0.05)
    assert budget.should_stop(START + 53 * MINUTE)


def test_rule_is_strict_at_the_boundary():
    kwargs = {"step_seconds": 10.0, "reserved_seconds": 5.0, "k_steps": 2.0}
    assert not must_stop_before_step(75.0, 100.0, **kwargs)
    assert must_stop_before_step(75.1, 100.0, **kwargs)


def test_first_step_uses_the_previous_segments_step_time():
    no_history = SessionBudget.for_session(START, 100.0, MarginPolicy(2.0, 1.0), Estimates())
    with_history = SessionBudget.for_session(
        START, 100.0, MarginPolicy(2.0, 1.0), Estimates(step_seconds=30.0)
    )
    # 20 s left, 1.5 s reserved: an unknown step is tried, a known 30 s step is not.
    assert not no_history.should_stop(START + 80.0)
    assert with_history.should_stop(START + 80.0)


def test_save_estimate_falls_back_to_state_size():
    budget = SessionBudget.for_session(START, 100.0, MarginPolicy(), Estimates())
    assert budget.save_seconds == SAVE_FLOOR_SECONDS
    budget.record_state_size(2_000_000_000)
    assert budget.save_seconds == pytest.approx(estimate_save_seconds(2_000_000_000))
    assert budget.save_seconds == pytest.approx(20.5)


def test_measured_save_time_beats_the_size_estimate():
    budget = SessionBudget.for_session(START, 100.0, MarginPolicy(), Estimates(save_seconds=3.0))
    budget.record_state_size(2_000_000_000)
    assert budget.save_seconds == 3.0


def play_session(
    budget: SessionBudget, step_times, save: float, startup: float = 0.0
) -> tuple[int, float]:
    """Run steps on a fake clock until the rule says stop; (steps taken, time the save ends)."""
    now, taken = START + startup, 0
    for seconds in step_times:
        if budget.should_stop(now):
            break
        now += seconds
        budget.record_step(seconds)
        taken += 1
    return taken, now + save


def guide_session(save: float = 30.0) -> SessionBudget:
    """12 h, 150 s steps (the seed guides on a T4), `save` s saves measured, default margin."""
    return SessionBudget.for_session(
        START, 12 * 3600.0, MarginPolicy(), Estimates(save_seconds=save, step_seconds=150.0)
    )


def test_steady_long_steps_spend_over_99_7_percent_of_12_hours_in_steps():
    # Where the last step falls depends on the phase: average over start-up times. Idle at the
    # end: (1.25 - 0.5) steps + save + 1 s safety; a 10 s save (a LoRA adapter) keeps 99.72 %,
    # a 30 s one 99.67 %.
    shares = []
    for startup in range(0, 150, 5):
        taken, save_end = play_session(guide_session(10.0), [150.0] * 400, 10.0, float(startup))
        assert save_end <= START + 12 * 3600.0
        shares.append(taken * 150.0 / (12 * 3600.0 - startup))
    assert sum(shares) / len(shares) >= 0.997


@pytest.mark.parametrize("steps_before_stop", range(2, 12))
def test_a_step_twice_as_slow_near_the_deadline_still_commits_in_time(steps_before_stop):
    steady, _ = play_session(guide_session(), [150.0] * 400, save=30.0)
    times = [150.0] * 400
    times[steady - steps_before_stop] = 300.0  # one step, late in the session, twice as slow
    taken, save_end = play_session(guide_session(), times, save=30.0)
    assert save_end <= START + 12 * 3600.0  # committed before the limit: nothing lost
    # The outlier costs its own extra 150 s plus a wider margin (1.25 x 300 s) until it leaves
    # the window: at most two steps fewer than a steady session.
    assert taken >= steady - 2


def test_one_slow_step_raises_the_margin_at_once():
    budget = guide_session()
    for _ in range(20):
        budget.record_step(150.0)
    assert budget.step_seconds == pytest.approx(150.0)
    budget.record_step(300.0)
    assert budget.step_seconds == 300.0  # the slowest recent step, not the EMA (195 s)
    assert budget.step_ema == pytest.approx(195.0)
    for _ in range(19):
        budget.record_step(150.0)
    assert budget.step_seconds == 300.0  # still in the window of 20
    budget.record_step(150.0)
    assert budget.step_seconds == pytest.approx(150.0, rel=1e-3)


def test_quantile_is_nearest_rank():
    assert step_quantile([]) == 0.0
    assert step_quantile([5.0]) == 5.0
    assert step_quantile([float(n) for n in range(1, 21)], 0.95) == 19.0
    assert step_quantile([float(n) for n in range(1, 21)]) == 20.0
