"""Failed authentications are throttled per client address: a token bucket of `burst` failures
refilled at one per `refill_seconds`. While a client's bucket is empty, its attempts get 429 with
Retry-After before any token is checked, so guessing runs at the refill rate at best.

In memory, per API process: a restart or another process starts afresh, which costs a guesser
one more burst, not the bound on its rate.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

BURST = 10
REFILL_SECONDS = 6.0  # 10 failures a minute, sustained
MAX_CLIENTS = 10_000


class FailureThrottle:
    def __init__(
        self,
        burst: int = BURST,
        refill_seconds: float = REFILL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = burst
        self.refill_seconds = refill_seconds
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, as of)
        self._lock = threading.Lock()

    def retry_after(self, client: str) -> int | None:
        """Whole seconds this client must wait before another attempt, or None: go ahead."""
        with self._lock:
            tokens = self._tokens(client, self.clock())
        if tokens >= 1:
            return None
        return max(1, math.ceil((1 - tokens) * self.refill_seconds))

    def failed(self, client: str) -> None:
        with self._lock:
            now = self.clock()
            tokens = self._tokens(client, now)
            self._buckets[client] = (max(0.0, tokens - 1), now)
            if len(self._buckets) > MAX_CLIENTS:
                self._forget_full(now)

    def _tokens(self, client: str, now: float) -> float:
        tokens, since = self._buckets.get(client, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - since) / self.refill_seconds)

    def _forget_full(self, now: float) -> None:
        for client in list(self._buckets):
            if self._tokens(client, now) >= self.burst:
                del self._buckets[client]
