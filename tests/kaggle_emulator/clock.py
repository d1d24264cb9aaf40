"""The emulator's clock: quota weeks, queue and dataset-processing delays read it, never time.time.

Sessions themselves run in real time under the supervisor; only the accounting uses this clock, so
a test can jump a week ahead with `ManualClock.advance` while a session keeps running.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()


class ManualClock:
    """A clock that moves only when a test advances it."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


class JumpClock:
    """Real time, plus the jumps a test makes with `advance`.

    For a test that runs the whole orchestrator on it: sessions spend quota and the engine
    schedules its polls in real time, yet a quota week of days ends only when the test jumps
    past it, however slow the machine. `utcnow` is the same instant as the engine reads it.
    """

    def __init__(self) -> None:
        self._offset = 0.0
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return time.time() + self._offset

    def utcnow(self) -> datetime:
        return datetime.fromtimestamp(self.now(), UTC)

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._offset += seconds
