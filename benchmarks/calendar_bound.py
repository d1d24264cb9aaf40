"""The quota-bound calendar time of a Kaggle job: pure arithmetic, no I/O.

With a weekly accelerator quota `A` refreshing every `W` and a job that needs `G` seconds of it,
starting at a refresh, no scheduler can finish before `(k - 1) * W + (G - (k - 1) * A)` where
`k = ceil(G / A)`: the full weeks it must wait through, plus what it uses of the last one. A
naive policy that restarts the job only when someone notices the refresh (every `notice` seconds)
loses up to `notice` at each of the `k - 1` refreshes: half of it on average.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class CalendarBound:
    weeks: int  # k: quota weeks the job touches
    minimum_seconds: float  # the physical limit
    naive_seconds: float  # restart-when-noticed, on average


def calendar_bound(need: float, allowance: float, week: float, notice: float) -> CalendarBound:
    if need <= 0 or allowance <= 0 or allowance > week:
        raise ValueError("need and allowance must be positive, and the allowance fit a week")
    weeks = math.ceil(need / allowance)
    minimum = (weeks - 1) * week + (need - (weeks - 1) * allowance)
    return CalendarBound(weeks, minimum, minimum + (weeks - 1) * notice / 2)


def overrun(measured: float, bound: float) -> float:
    """How far `measured` is above `bound`, as a fraction of `bound`."""
    return measured / bound - 1.0
