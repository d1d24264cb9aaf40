"""The 12 h projection: plain arithmetic on measured costs, checked against hand-worked cases."""

from __future__ import annotations

import pytest

from benchmarks.projection import (
    GUIDE_SAVE_STEPS,
    KAGGLE_SESSION_SECONDS,
    Costs,
    project_baton,
    project_periodic,
    project_submitit,
    project_uninterrupted,
)
from worker.boundary.contract import MarginPolicy

TWELVE_H = KAGGLE_SESSION_SECONDS
FAST = Costs(step=0.1, startup=5.0, save=0.05)


def test_uninterrupted_spends_all_but_startup_and_one_save_in_steps() -> None:
    got = project_uninterrupted("a", 100.0, Costs(step=1.0, startup=4.0, save=1.0))
    assert (got.in_steps, got.kept, got.lost_steps) == (95.0, 95.0, 0.0)


def test_baton_reserves_k_minus_half_steps_and_padded_save_and_safety() -> None:
    got = project_baton("b", 100.0, Costs(step=2.0, startup=4.0, save=4.0), MarginPolicy(2.0, 1.0))
    # 100 - (4*1.25 + 1) - 1.5*2 - 4
    assert got.in_steps == pytest.approx(87.0)
    assert got.kept == got.in_steps
    assert got.lost_steps == 0


def test_baton_meets_its_99_percent_target_on_a_12_hour_session() -> None:
    assert project_baton("b", TWELVE_H, FAST).in_step_share >= 0.99
    guides = Costs(step=125.0, startup=60.0, save=30.0)
    assert project_baton("b", TWELVE_H, guides).in_step_share >= 0.99


def test_periodic_loses_half_an_interval_per_boundary() -> None:
    got = project_periodic("c", 1000.0, Costs(step=1.0, startup=0.0, save=0.0), save_every=100)
    assert got.lost_steps == 50
    assert got.in_steps == pytest.approx(1000.0)
    assert got.kept == pytest.approx(950.0)


def test_periodic_pays_for_every_save() -> None:
    got = project_periodic("c", 110.0, Costs(step=1.0, startup=0.0, save=10.0), save_every=10)
    # each 10-step interval costs 20 s: 5.5 intervals, 55 steps
    assert got.in_steps == pytest.approx(55.0)


@pytest.mark.parametrize("step", [100.0, 150.0])
def test_the_guides_interval_is_longer_than_a_session_so_nothing_is_kept(step: float) -> None:
    costs = Costs(step=step, startup=60.0, save=30.0)
    got = project_periodic("c", TWELVE_H, costs, save_every=GUIDE_SAVE_STEPS)
    assert got.kept == 0
    assert got.lost_steps == pytest.approx(got.in_steps / step)
    assert got.lost_steps < GUIDE_SAVE_STEPS


def test_submitit_stops_at_the_signal_and_keeps_it_all_when_a_step_fits_the_delay() -> None:
    got = project_submitit("d", 1000.0, Costs(step=1.0, startup=10.0, save=5.0), signal_delay=90)
    assert (got.in_steps, got.kept, got.lost_steps) == (900.0, 900.0, 0.0)


def test_submitit_risks_the_session_when_a_step_outlasts_the_delay() -> None:
    costs = Costs(step=150.0, startup=0.0, save=30.0)
    got = project_submitit("d", 1500.0, costs, signal_delay=90)
    # the handler waits for the step to end: (150 + 30 - 90) / 150 = 60 % of boundaries lose all
    assert got.kept == pytest.approx(0.4 * got.in_steps)


def test_default_margin_keeps_99_7_percent_of_12_hours_with_the_guides_150_s_steps() -> None:
    # Start-up and save as the benchmark measures them on CPU (a few seconds).
    costs = Costs(step=150.0, startup=5.0, save=2.0)
    assert project_baton("b", TWELVE_H, costs).in_step_share >= 0.997
    # The old fixed margin of two mean steps could not.
    assert project_baton("b", TWELVE_H, costs, MarginPolicy(2.0, 1.0)).in_step_share < 0.995
