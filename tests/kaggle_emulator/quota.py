"""Weekly accelerator quota arithmetic: pure functions of time intervals, no I/O and no clock."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class QuotaWeek:
    """Quota weeks of `length` seconds, the first starting at `epoch`."""

    epoch: float
    length: float

    def start(self, now: float) -> float:
        return self.epoch + math.floor((now - self.epoch) / self.length) * self.length

    def refresh_time(self, now: float) -> float:
        return self.start(now) + self.length


def used_seconds(
    intervals: Iterable[tuple[float, float | None]], week_start: float, now: float
) -> float:
    """Time the intervals (start, end or None while running) spent inside [week_start, now]."""
    total = 0.0
    for start, end in intervals:
        stop = now if end is None else min(end, now)
        total += max(0.0, stop - max(start, week_start))
    return total


def reserved_seconds(running: Iterable[tuple[float, float]], now: float) -> float:
    """Time still reserved by running sessions: (started_at, limit) -> what is left of the limit."""
    return sum(max(0.0, limit - (now - started)) for started, limit in running)


def exhausted(used: float, allowance: float) -> bool:
    return used >= allowance
