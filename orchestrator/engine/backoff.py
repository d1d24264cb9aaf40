"""When to look at a job again after a transient error: exponential backoff with jitter.

Pure arithmetic. Backoff is state (the job's `next_attempt_at`), never a sleep: the embedded loop
and Celery beat both pick only jobs that are due.
"""

from __future__ import annotations

import random
from collections.abc import Callable

BASE_SECONDS = 2.0
CAP_SECONDS = 600.0
# Doublings counted at most: far past the cap, and 2.0 * 2**1024 would not fit a float (a job in
# an outage of a week reaches 1025 consecutive errors).
MAX_DOUBLINGS = 32


def backoff_seconds(
    errors: int,
    retry_after: float | None = None,
    *,
    floor: float = 0.0,
    rng: Callable[[], float] = random.random,
) -> float:
    """Delay after the `errors`-th consecutive transient error (1 for the first).

    Exponential from BASE_SECONDS, capped, with "equal jitter" (half fixed, half random) so that
    jobs failing together spread out; never sooner than the service's Retry-After, nor than
    `floor` (the backend's own poll interval).
    """
    exponential = min(CAP_SECONDS, BASE_SECONDS * 2 ** min(max(0, errors - 1), MAX_DOUBLINGS))
    jittered = exponential / 2 + rng() * exponential / 2
    return float(max(jittered, retry_after or 0.0, floor))
