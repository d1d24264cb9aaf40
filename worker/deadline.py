"""The deadline rule: whether one more training step still leaves time to commit and exit.

Pure arithmetic on an injected clock reading; nothing here calls time. The rule is

    stop before a step if now + k*step + save + upload + exit + safety > deadline

where `step` is the larger of the EMA of this segment's step times and a high percentile
(STEP_QUANTILE, the slowest) of the last STEP_WINDOW of them, not a fixed multiple of the
mean: one slow step raises the margin at once, so the steps after it still leave time to commit, and
steady steps need only a little headroom (k = 1.25 by default, not 2). With 150 s steps on a
12 h session that keeps about 99.7 % of it in steps instead of 99.5 %. The last step itself may
be at most about k times the percentile (plus what the save and safety estimates leave over).

First step: before this segment has measured a step, the step term uses the previous segment's
`Estimates.step_seconds`; with no history at all it is 0, because only taking a step can measure
one. If the rule already says stop before the first step, the runtime takes no step and still
commits the resumed state under this segment's identity (outcome `deadline`, end_step ==
start_step), so every committed outcome leaves the checkpoint the next segment's `expect` names.
A zero-progress segment tells the orchestrator the session is too short for this job.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from worker.boundary.contract import Estimates, MarginPolicy

# Conservative sequential write throughput for estimating the first save (Kaggle's disk, plus
# reading the files back to hash them), and a floor for fsyncs and small-file overhead.
SAVE_BYTES_PER_SECOND = 100e6
SAVE_FLOOR_SECONDS = 0.5
EMA_ALPHA = 0.3
# Recent steps the percentile looks at, and which: the slowest of the last 20, so one outlier
# counts fully for the next 20 steps (a lower percentile of so few would ignore it).
STEP_WINDOW = 20
STEP_QUANTILE = 1.0


def step_quantile(times: Sequence[float], quantile: float = STEP_QUANTILE) -> float:
    """Nearest-rank percentile of `times` (0 for none)."""
    if not times:
        return 0.0
    ordered = sorted(times)
    rank = max(1, math.ceil(quantile * len(ordered)))
    return ordered[rank - 1]


def estimate_save_seconds(state_bytes: int) -> float:
    """A save estimate from the state size, for when no earlier segment measured one."""
    return state_bytes / SAVE_BYTES_PER_SECOND + SAVE_FLOOR_SECONDS


def must_stop_before_step(
    now: float,
    deadline: float,
    *,
    step_seconds: float,
    reserved_seconds: float,
    k_steps: float,
) -> bool:
    """The rule itself: True if k more steps plus the reserved exit costs overrun the deadline."""
    return now + k_steps * step_seconds + reserved_seconds > deadline


@dataclass
class SessionBudget:
    """Tracks step times within one session and decides when to stop and commit."""

    deadline: float
    margin: MarginPolicy = field(default_factory=MarginPolicy)
    estimates: Estimates = field(default_factory=Estimates)
    step_ema: float | None = None
    state_bytes: int | None = None
    recent_steps: deque[float] = field(default_factory=lambda: deque(maxlen=STEP_WINDOW))

    @classmethod
    def for_session(
        cls,
        process_start: float,
        limit_seconds: float,
        margin: MarginPolicy,
        estimates: Estimates,
    ) -> SessionBudget:
        # Measured from the process's own start: queue time before it is unknown and unbilled.
        return cls(deadline=process_start + limit_seconds, margin=margin, estimates=estimates)

    def record_step(self, seconds: float) -> None:
        self.recent_steps.append(seconds)
        if self.step_ema is None:
            self.step_ema = seconds
        else:
            self.step_ema = EMA_ALPHA * seconds + (1 - EMA_ALPHA) * self.step_ema

    def record_state_size(self, state_bytes: int) -> None:
        """Lets the save estimate follow the state size when no measured save time was given."""
        self.state_bytes = state_bytes

    @property
    def step_seconds(self) -> float:
        """What one more step may take: the EMA, or the recent high percentile if larger."""
        if self.step_ema is not None:
            return max(self.step_ema, step_quantile(list(self.recent_steps)))
        return self.estimates.step_seconds or 0.0

    @property
    def save_seconds(self) -> float:
        if self.estimates.save_seconds is not None:
            return self.estimates.save_seconds
        if self.state_bytes is not None:
            return estimate_save_seconds(self.state_bytes)
        return SAVE_FLOOR_SECONDS

    @property
    def reserved_seconds(self) -> float:
        """Time kept back for everything after the last step."""
        return (
            self.save_seconds
            + self.estimates.upload_seconds
            + self.estimates.exit_seconds
            + self.margin.safety_seconds
        )

    def should_stop(self, now: float) -> bool:
        return must_stop_before_step(
            now,
            self.deadline,
            step_seconds=self.step_seconds,
            reserved_seconds=self.reserved_seconds,
            k_steps=self.margin.k_steps,
        )
