"""The embedded loop of `baton serve`: it reconciles at once on start, again when woken (a
submit or an action nudges it), outlives a tick that fails, and stops when told. The interval is
an hour, so every tick here is one the test caused, never one the machine's speed decided."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from orchestrator.engine.reconcile_loop import ReconcileLoop

HOUR = 3600.0
HANG_GUARD = 60.0


class CountingEngine:
    """Stands in for the engine: counts ticks, lets the test wait for the n-th, and fails the
    ticks it is told to."""

    def __init__(self, failing: set[int]) -> None:
        self.ticks = 0
        self.failing = failing
        self.ticked = threading.Condition()

    def reconcile_all(self) -> None:
        with self.ticked:
            self.ticks += 1
            self.ticked.notify_all()
            if self.ticks in self.failing:
                raise RuntimeError(f"tick {self.ticks} broke")

    def wait_for(self, ticks: int) -> None:
        """Until the loop has ticked `ticks` times; fails at once if its thread has died."""
        hang_guard = time.monotonic() + HANG_GUARD
        with self.ticked:
            while self.ticks < ticks:
                assert _loop_threads(), f"the loop died after {self.ticks} ticks"
                assert time.monotonic() < hang_guard, f"still {self.ticks} ticks"
                self.ticked.wait(0.05)


def _loop(engine: CountingEngine) -> ReconcileLoop:
    return ReconcileLoop(engine, HOUR)  # type: ignore[arg-type]


def _loop_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "baton-reconcile"]


def test_the_loop_ticks_on_start_and_at_each_wake_and_outlives_a_failed_tick(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = CountingEngine(failing={1})
    loop = _loop(engine)
    with caplog.at_level(logging.ERROR):
        loop.start()
        engine.wait_for(1)
        for woken in (2, 3):
            loop.wake()
            engine.wait_for(woken)
        loop.stop()
    assert _loop_threads() == []
    assert engine.ticks == 3
    failures = [record for record in caplog.records if record.exc_info]
    assert [record.getMessage() for record in failures] == ["reconcile tick failed"]


def test_a_stopped_loop_ticks_no_more_and_its_thread_never_holds_up_exit() -> None:
    engine = CountingEngine(failing=set())
    loop = _loop(engine)
    loop.start()
    [thread] = _loop_threads()
    assert thread.daemon, "the loop's thread would keep `baton serve` from exiting"
    engine.wait_for(1)
    loop.stop()
    ticks = engine.ticks
    loop.wake()
    assert _loop_threads() == []
    assert engine.ticks == ticks == 1


def test_the_interval_is_the_wait_between_unwoken_ticks() -> None:
    engine = CountingEngine(failing=set())
    loop = ReconcileLoop(engine, 0.0)  # type: ignore[arg-type]
    loop.start()
    engine.wait_for(5)  # no wake: only the interval brings the later ticks
    loop.stop()
    assert _loop_threads() == []
