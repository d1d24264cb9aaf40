"""Successor planning: the costs the next segment budgets for, learned from earlier ones.

One rule for both planners: the orchestrator's (orchestrator/planner.py), which sees every
earlier segment, and a self-chaining kernel's (worker/kaggle_access/chaining.py), which sees
only its own segment and pushes the next one while the orchestrator may be offline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from worker.boundary.contract import CheckpointRef, Estimates, SegmentResult, SegmentSpec
from worker.boundary.paths import RESUME_PATH

# Learned costs use the worst of the last few segments, padded: a save that took 10 s last time
# may take 12 s this time, and overrunning the deadline loses the whole session.
ESTIMATE_WINDOW = 3
ESTIMATE_PADDING = 1.25
# At least half of a session must be training steps, or it is not worth its quota.
USEFUL_FACTOR = 2.0
# Until a segment measured its publishing, the job's fixed reserve stands in for it, but never more
# than this share of the session: a short session must not spend itself on a guess (with the
# start-up, at least half of a session worth launching stays training, USEFUL_FACTOR).
MAX_RESERVE_SHARE = 1 / 3


@dataclass(frozen=True)
class PastSegment:
    """Measured costs of an earlier segment that committed (from its result.json timings)."""

    save_seconds: float
    upload_seconds: float
    worker_seconds: float  # worker's own total, process start to result.json
    session_seconds: float | None  # the backend's wall time for the whole session
    step_seconds: float | None  # the segment's step_time_ema
    setup_seconds: float = 0.0  # start-up plus load: what a session spends before its first step
    checkpoint_bytes: int | None = None  # the committed checkpoint's size (its manifest)
    end_step: int | None = None  # the step it committed

    @property
    def publish_rate(self) -> float | None:
        """Bytes per second its session published its checkpoint at; None where it did not."""
        if not self.checkpoint_bytes or self.upload_seconds <= 0:
            return None
        return self.checkpoint_bytes / self.upload_seconds

    @property
    def fixed_seconds(self) -> float:
        """Everything a session spends outside training steps."""
        exit_seconds = max(0.0, (self.session_seconds or 0.0) - self.worker_seconds)
        return self.setup_seconds + self.save_seconds + self.upload_seconds + exit_seconds


def minimum_session_seconds(history: Sequence[PastSegment], floor: float = 0.0) -> float:
    """The shortest session worth launching: at least half of it must be training steps.

    Below that, quota is better spent after the refresh than on sessions that mostly boot. The
    fixed cost is the (lower) median of the last few sessions, not the worst: quota left at the
    refresh is lost, so one slow start-up (a busy host) must not skip the week's last session
    for the next three segments. A session that turns out short still commits at its deadline.
    The orchestrator's planner and a self-chaining kernel sizing its successor both use it.
    """
    recent = sorted(past.fixed_seconds for past in list(history)[-ESTIMATE_WINDOW:])
    fixed = recent[(len(recent) - 1) // 2] if recent else 0.0  # the lower median of two
    return max(floor, USEFUL_FACTOR * fixed)


def measured_segment(
    result: SegmentResult, upload_seconds: float, checkpoint_bytes: int | None = None
) -> PastSegment:
    """What a kernel knows of its own segment's costs (no one measures its session from
    outside)."""
    return PastSegment(
        save_seconds=result.timings.save,
        upload_seconds=upload_seconds,
        worker_seconds=result.timings.total,
        session_seconds=None,
        step_seconds=result.step_time_ema,
        setup_seconds=result.timings.startup + result.timings.load,
        checkpoint_bytes=checkpoint_bytes,
        end_step=result.end_step,
    )


def publish_rate(history: Sequence[PastSegment]) -> float | None:
    """The slowest publish rate of the last few segments, derated by ESTIMATE_PADDING; None
    before any segment published."""
    rates = [rate for past in list(history)[-ESTIMATE_WINDOW:] if (rate := past.publish_rate)]
    return min(rates) / ESTIMATE_PADDING if rates else None


def predicted_checkpoint_bytes(
    history: Sequence[PastSegment], steps_ahead: float, earlier: tuple[int, int] | None = None
) -> int | None:
    """The size of the checkpoint the next segment commits after `steps_ahead` more steps.

    The latest committed size, grown at the per-step rate between the last two commits (never
    shrunk: an overestimate costs seconds, an underestimate the in-kernel upload). Where the
    history holds fewer than two sizes, `earlier` (step, bytes) stands in for the one before:
    the size predicted for step 0 (the memory planner's, or the spec's), or in a kernel the
    checkpoint it resumed from. None before anything is known.
    """
    sizes = [
        (past.end_step, past.checkpoint_bytes)
        for past in history
        if past.end_step is not None and past.checkpoint_bytes is not None
    ]
    if len(sizes) < 2 and earlier is not None:
        sizes.insert(0, earlier)
    if not sizes:
        return None
    step, size = sizes[-1]
    if len(sizes) < 2 or sizes[-2][0] >= step:
        return size
    before_step, before = sizes[-2]
    growth = max(0.0, (size - before) / (step - before_step))
    return math.ceil(size + growth * max(0.0, steps_ahead))


def next_checkpoint_bytes(
    history: Sequence[PastSegment],
    *,
    limit_seconds: float,
    steps_left: int,
    earlier: tuple[int, int] | None = None,
) -> int | None:
    """The size of the checkpoint the next segment commits: predicted_checkpoint_bytes over as
    many steps as fit its session at the latest step time, or the steps left if fewer."""
    steps = [past.step_seconds for past in history if past.step_seconds]
    fit = limit_seconds / steps[-1] if steps else math.inf
    return predicted_checkpoint_bytes(history, min(float(steps_left), fit), earlier)


def publish_seconds(
    history: Sequence[PastSegment],
    *,
    limit_seconds: float,
    size: int | None,
    reserve_seconds: float,
    keep_reserve: bool = False,
) -> float:
    """Seconds the next segment keeps for publishing its checkpoint: the `size` it will write
    (next_checkpoint_bytes) over the rate earlier segments published at. Until a segment
    measured that rate, the job's `reserve_seconds`, at most MAX_RESERVE_SHARE of the session;
    `keep_reserve` keeps it as a floor throughout (a self-chaining segment pushes its successor
    after publishing).
    """
    reserve = min(reserve_seconds, MAX_RESERVE_SHARE * limit_seconds)
    rate = publish_rate(history)
    if rate is None:
        # Publish seconds measured without a size (a segment from before sizes were kept) are
        # a measure too: learn_estimates pads them.
        measured = any(past.upload_seconds > 0 for past in history)
        return reserve if keep_reserve or not measured else 0.0
    return max((size or 0) / rate, reserve if keep_reserve else 0.0)


def learn_estimates(
    history: Sequence[PastSegment],
    upload_floor: float = 0.0,
    exit_floor: float = 0.0,
    checkpoint_bytes: int | None = None,
) -> Estimates:
    """The padded worst of the last ESTIMATE_WINDOW segments' costs, and the latest step time.

    The floors keep what the history cannot show: the time a self-chaining segment reserves to
    publish and push, and (inside a kernel, where no one measures it) the exit time. Given the
    size of the checkpoint the next segment will write (`checkpoint_bytes`), the save is kept
    for that size at the slowest recent save rate too: a checkpoint that grows takes longer to
    write than the smaller one measured before it.
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
    save = max(past.save_seconds for past in recent)
    rates = [
        past.checkpoint_bytes / past.save_seconds
        for past in recent
        if past.checkpoint_bytes and past.save_seconds > 0
    ]
    if checkpoint_bytes and rates:
        save = max(save, checkpoint_bytes / min(rates))
    return Estimates(
        save_seconds=save * ESTIMATE_PADDING,
        upload_seconds=max(
            max(past.upload_seconds for past in recent) * ESTIMATE_PADDING, upload_floor
        ),
        exit_seconds=max(max(exits, default=0.0) * ESTIMATE_PADDING, exit_floor),
        step_seconds=steps[-1] if steps else None,
    )


def successor_spec(
    segment: SegmentSpec,
    result: SegmentResult,
    resume: CheckpointRef,
    upload_seconds: float,
    checkpoint_bytes: int | None = None,
) -> SegmentSpec:
    """The next segment, planned inside a kernel: resume from `resume`, with the costs measured
    here (`upload_seconds`: publishing this segment's checkpoint of `checkpoint_bytes`)."""
    measured = measured_segment(result, upload_seconds, checkpoint_bytes)
    started = segment.estimates.checkpoint_bytes
    # What this segment was given stays the floor: it stands for the orchestrator's reserve and
    # the earlier segments' measures, which the kernel does not see.
    size = next_checkpoint_bytes(
        [measured],
        limit_seconds=segment.limit_seconds,
        steps_left=segment.total_steps - result.end_step,
        earlier=(result.start_step, started) if started is not None else None,
    )
    floor = max(
        publish_seconds(
            [measured], limit_seconds=segment.limit_seconds, size=size, reserve_seconds=0.0
        ),
        segment.estimates.upload_seconds,
    )
    learned = learn_estimates(
        [measured],
        upload_floor=floor,
        exit_floor=segment.estimates.exit_seconds,
        checkpoint_bytes=size,
    )
    estimates = replace(learned, checkpoint_bytes=checkpoint_bytes)
    return replace(
        segment,
        segment_index=segment.segment_index + 1,
        expect=resume,
        resume_path=RESUME_PATH,
        estimates=estimates,
    )
