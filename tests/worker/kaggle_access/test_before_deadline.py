"""A Kaggle call that would outlive its session is abandoned at the deadline
(worker/kaggle_access/before_deadline.py)."""

from __future__ import annotations

import threading
import time

import pytest

from worker.boundary.errors import Rejected
from worker.kaggle_access.before_deadline import TooLate, call_before


def test_a_call_that_ends_in_time_gives_its_value_or_its_exception() -> None:
    assert call_before(time.time() + 60, lambda: 42) == 42

    def refuse() -> None:
        raise Rejected("refused")  # what the Kaggle client raises: the backend error contract

    with pytest.raises(Rejected, match="refused"):
        call_before(time.time() + 60, refuse)


def test_a_call_still_running_at_the_deadline_is_left_behind() -> None:
    """An upload that never ends (an event never set, not a sleep: no machine is too slow)."""
    release = threading.Event()
    with pytest.raises(TooLate):
        call_before(time.time() + 0.05, release.wait)
    release.set()


def test_a_deadline_already_past_does_not_wait() -> None:
    release = threading.Event()
    with pytest.raises(TooLate):
        call_before(time.time() - 1, release.wait)
    release.set()
