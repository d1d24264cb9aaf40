"""The Kaggle quota each user was last seen to have, so an ETA can count it without asking Kaggle.

Filled wherever Baton asks Kaggle anyway (GET /api/v1/quota, the jobs page); read by the ETA.
An entry older than `max_age` is forgotten: an ETA on stale quota would be worse than none.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.eta import QuotaPlan
from orchestrator.wire import QuotaOut


@dataclass
class QuotaCache:
    max_age: float = 600.0
    clock: Callable[[], float] = time.monotonic
    _seen: dict[str, tuple[float, list[QuotaOut]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def remember(self, user_id: str, quotas: list[QuotaOut]) -> None:
        with self._lock:
            self._seen[user_id] = (self.clock(), quotas)

    def plan(self, user_id: str) -> QuotaPlan | None:
        """The user's Kaggle quota as the ETA needs it, if seen recently."""
        with self._lock:
            seen = self._seen.get(user_id)
        if seen is None or self.clock() - seen[0] > self.max_age or not seen[1]:
            return None
        quota = seen[1][0]
        return QuotaPlan(
            seconds_left=quota.seconds_left,
            refresh_at=quota.refresh_at,
            allowance_seconds=quota.allowance_seconds,
        )
