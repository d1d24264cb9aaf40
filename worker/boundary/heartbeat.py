"""A running session's heartbeat (`working/heartbeat.json`): its latest step, metrics, step time.

The worker rewrites it while it trains; a backend that can read into a running session hands it
to the orchestrator, which stores it on the segment (`segments.progress`) and shows it as live
progress. Both sides read and write it through `Heartbeat`, never through the JSON's keys.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, TypeGuard

from worker.boundary.contract import WatchdogPolicy


@dataclass(frozen=True)
class Heartbeat:
    step: int
    at: float  # when it was written: seconds since the epoch, the session's wall clock
    loss: float | None = None
    step_seconds: float | None = None  # the session's step-time moving average
    # Where the session's time went so far (startup, load, train seconds): the page draws a
    # running session by phase.
    phases: dict[str, float] | None = None
    # Every finite scalar the latest step logged (loss included): the page's live point.
    metrics: dict[str, float] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> Heartbeat | None:
        """The heartbeat a session wrote, or None for anything else (no file yet, a foreign one)."""
        if not isinstance(data, dict):
            return None
        step, at = data.get("step"), data.get("at")
        if not isinstance(step, int) or isinstance(step, bool) or not _is_number(at):
            return None
        loss, step_seconds = data.get("loss"), data.get("step_seconds")
        return cls(
            step=step,
            at=float(at),
            loss=float(loss) if _is_number(loss) else None,
            step_seconds=float(step_seconds) if _is_number(step_seconds) else None,
            phases=_phases(data.get("phases")),
            metrics=_scalars(data.get("metrics")),
        )

    @property
    def written_at(self) -> datetime:
        return datetime.fromtimestamp(self.at, UTC)

    def age(self, now: datetime) -> float:
        return now.timestamp() - self.at

    def stalled(self, watchdog: WatchdogPolicy, now: datetime) -> bool:
        """Older than the hang bound the session itself runs under (its watchdog ends it then)."""
        if watchdog.hang_floor_seconds <= 0:
            return False
        return self.age(now) > watchdog.hang_bound(self.step_seconds)


def _phases(data: object) -> dict[str, float] | None:
    if not isinstance(data, dict):
        return None
    return {str(k): float(v) for k, v in data.items() if _is_number(v) and v >= 0}


def _scalars(data: object) -> dict[str, float] | None:
    if not isinstance(data, dict):
        return None
    return {str(k): float(v) for k, v in data.items() if _is_number(v) and math.isfinite(v)}


def live_metrics(metrics: Mapping[str, float] | None) -> dict[str, float] | None:
    """What a heartbeat carries of a step's metrics: the finite ones (JSON has no NaN)."""
    if not metrics:
        return None
    finite = {k: float(v) for k, v in metrics.items() if k != "step" and math.isfinite(v)}
    return finite or None


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)
