"""Successor planning: the costs the next segment budgets for, learned from earlier ones.

One rule for both planners: the orchestrator's (orchestrator/planner.py), which sees every
earlier segment, and a self-chaining kernel's (worker/kaggle_access/chaining.py), which sees
only its own segment and pushes the next one while the orchestrator may be offline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from worker.boundary.contract import CheckpointRef, Estimates, SegmentResult, SegmentSpec
from worker.boundary.paths import RESUME_PATH

# Learned costs use the worst of the last few segments, padded: a save that took 10 s last time
# may take 12 s this time, and overrunning the deadline loses the whole session.
ESTIMATE_WINDOW = 3
ESTIMATE_PADDING = 1.25


@dataclass(frozen=True)
class PastSegment:
    """Measured costs of an earlier segment that committed (from its result.json timings)."""

    save_seconds: float
    upload_seconds: float
    worker_seconds: float  # worker's own total, process start to result.json
    session_seconds: float | None  # the backend's wall time for the whole session
    step_seconds: float | None  # the segment's step_time_ema
    setup_seconds: float = 0.0  # start-up plus load: what a session spends before its first step

    @property
    def fixed_seconds(self) -> float:
        """Everything a session spends outside training steps."""
        exit_seconds = max(0.0, (self.session_seconds or 0.0) - self.worker_seconds)
        return self.setup_seconds + self.save_seconds + self.upload_seconds + exit_seconds


def learn_estimates(
    history: Sequence[PastSegment], upload_floor: float = 0.0, exit_floor: float = 0.0
) -> Estimates:
    """The padded worst of the last ESTIMATE_WINDOW segments' costs, and the latest step time.

    The floors keep what the history cannot show: the time a self-chaining segment reserves to
    publish and push, and (inside a kernel, where no one measures it) the exit time.
    """
    recent = list(history)[-ESTIMATE_WINDOW:]
    if not recent:
        return Estimates(upload_seconds=upload_floor, exit_seconds=exit_floor)
    exits = [
        max(0.0, past.session_seconds - past.worker_seconds)
        for past in recent
        if past.session_seconds is not None
    ]
    steps = [past.step_seconds for past in recent if past.step_seconds is not None]
    return Estimates(
        save_seconds=max(past.save_seconds for past in recent) * ESTIMATE_PADDING,
        upload_seconds=max(
            max(past.upload_seconds for past in recent) * ESTIMATE_PADDING, upload_floor
        ),
        exit_seconds=max(max(exits, default=0.0) * ESTIMATE_PADDING, exit_floor),
        step_seconds=steps[-1] if steps else None,
    )


def successor_spec(
    segment: SegmentSpec, result: SegmentResult, resume: CheckpointRef, upload_seconds: float
) -> SegmentSpec:
    """The next segment, planned inside a kernel: resume from `resume`, with the costs measured
    here (`upload_seconds`: publishing this segment's checkpoint)."""
    measured = PastSegment(
        save_seconds=result.timings.save,
        upload_seconds=upload_seconds,
        worker_seconds=result.timings.total,
        session_seconds=None,
        step_seconds=result.step_time_ema,
        setup_seconds=result.timings.startup + result.timings.load,
    )
    estimates = learn_estimates(
        [measured],
        upload_floor=segment.estimates.upload_seconds,
        exit_floor=segment.estimates.exit_seconds,
    )
    return replace(
        segment,
        segment_index=segment.segment_index + 1,
        expect=resume,
        resume_path=RESUME_PATH,
        estimates=estimates,
    )
