"""Who called what, and when: the record every test can read, and Kaggle's unpublished rate limit.

Kaggle rate-limits its API without publishing the limits (kaggle-api #217, #132, #494) and
answers 429 with Retry-After. The emulator counts each caller's calls over a sliding minute of
its clock.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from tests.kaggle_emulator.errors import ApiError

WINDOW_SECONDS = 60.0


@dataclass(frozen=True)
class Call:
    user: str
    method: str
    at: float
    version_label: str | None = None


class RateLimited(ApiError):
    """A 429. `google_body`: Kaggle's body as kaggle-api #931 shows it, the error nested in
    `error` with `status: RESOURCE_EXHAUSTED` (kagglesdk then raises from raise_for_status, not
    from a top-level `code`); otherwise the emulator's old `{"code", "message"}`."""

    def __init__(self, retry_after: float, google_body: bool = True) -> None:
        super().__init__(429, "Too many requests")
        self.retry_after = retry_after
        self.google_body = google_body

    def body(self) -> dict[str, object]:
        if not self.google_body:
            return {"code": 429, "message": "Too many requests"}
        error = {"code": 429, "message": self.message, "status": "RESOURCE_EXHAUSTED"}
        return {"error": error}


class CallLog:
    def __init__(self, per_minute: float | None, google_body: bool = True) -> None:
        self.per_minute = per_minute
        self.google_body = google_body
        self.calls: list[Call] = []
        self._recent: dict[str, deque[float]] = {}
        self.rate_limited = 0

    def admit(self, user: str, method: str, now: float, label: str | None) -> None:
        """Record the call; RateLimited when `user` is over the limit (the call is not made)."""
        self.calls.append(Call(user, method, now, label))
        if self.per_minute is None:
            return
        recent = self._recent.setdefault(user, deque())
        while recent and recent[0] <= now - WINDOW_SECONDS:
            recent.popleft()
        if len(recent) >= self.per_minute:
            self.rate_limited += 1
            wait = max(1.0, math.ceil(recent[0] + WINDOW_SECONDS - now))
            raise RateLimited(wait, self.google_body)
        recent.append(now)
