"""A Kaggle call that would outlive its session is abandoned at the deadline
(worker/kaggle_access/before_deadline.py)."""

from __future__ import annotations

import os
import subprocess
import sys
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


# The abandoned call blocks on the parent's stdin, which the parent closes only after the child
# has exited (or, if it never does, after the hang guard): no sleep, no measured time.
_ABANDON_AND_EXIT = """
import sys, time
from worker.kaggle_access.before_deadline import TooLate, call_before
try:
    call_before(time.time() - 1, sys.stdin.readline)
except TooLate:
    print("abandoned", flush=True)
"""


def test_a_session_exits_while_its_abandoned_upload_still_runs() -> None:
    """The point of abandoning: the session's process ends in time (Kaggle keeps its output),
    however long the upload it left behind would still take."""
    with subprocess.Popen(
        [sys.executable, "-c", _ABANDON_AND_EXIT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    ) as child:
        try:
            code = child.wait(timeout=60)  # a hang guard: the child exits at once or never
        except subprocess.TimeoutExpired:
            code = None
        assert child.stdin is not None
        assert child.stdout is not None
        child.stdin.close()
        output = child.stdout.read()
    assert code == 0, "the process waited for the call it had abandoned"
    assert output.strip() == "abandoned"
