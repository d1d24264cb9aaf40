"""The quota-bound calendar minimum, played at the numbers a user would check by hand."""

from __future__ import annotations

import pytest

from benchmarks.calendar_bound import calendar_bound, overrun

WEEK = 168.0  # hours
QUOTA = 30.0


def test_two_and_a_half_weeks_of_quota_end_in_the_third_week() -> None:
    bound = calendar_bound(need=75.0, allowance=QUOTA, week=WEEK, notice=24.0)
    assert bound.weeks == 3
    assert bound.minimum_seconds == 2 * WEEK + 15.0
    assert bound.naive_seconds == bound.minimum_seconds + 2 * 12.0


def test_a_job_within_one_weeks_quota_needs_no_wait() -> None:
    bound = calendar_bound(need=20.0, allowance=QUOTA, week=WEEK, notice=24.0)
    assert (bound.weeks, bound.minimum_seconds, bound.naive_seconds) == (1, 20.0, 20.0)


def test_exactly_two_weeks_of_quota_ends_at_the_end_of_the_second_allowance() -> None:
    assert calendar_bound(60.0, QUOTA, WEEK, 0.0).minimum_seconds == WEEK + QUOTA


def test_overrun_is_relative_to_the_bound() -> None:
    assert overrun(102.0, 100.0) == pytest.approx(0.02)


def test_nonsense_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        calendar_bound(10.0, 0.0, WEEK, 1.0)
