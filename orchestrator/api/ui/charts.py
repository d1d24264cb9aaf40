"""Geometry for the status page's server-rendered SVG: the session timeline and the loss curve.

Pure functions from view models to shapes; the templates only draw what these return.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from orchestrator.quota_use import PHASES, phase_seconds
from orchestrator.wire import MetricPoint, SegmentOut

__all__ = ["PHASES", "loss_curve", "timeline"]


@dataclass(frozen=True)
class Bar:
    phase: str
    x: float
    width: float
    seconds: float


@dataclass(frozen=True)
class TimelineRow:
    index: int
    state: str
    bars: list[Bar]
    label: str  # read by screen readers: what the row shows in words


@dataclass(frozen=True)
class Timeline:
    rows: list[TimelineRow]
    width: float
    scale_seconds: float  # what the full width stands for


def timeline(segments: Sequence[SegmentOut], now: datetime, width: float = 600.0) -> Timeline:
    """One row per session, every bar drawn to the same scale: the longest session limit."""
    phases = [phase_seconds(segment, now) for segment in segments]
    longest = max(
        [segment.limit_seconds for segment in segments] + [sum(p.values()) for p in phases],
        default=1.0,
    )
    scale = width / max(longest, 1e-9)
    rows = []
    for segment, seconds in zip(segments, phases, strict=True):
        x = 0.0
        bars = []
        for phase in PHASES:
            value = seconds.get(phase, 0.0)
            if value <= 0:
                continue
            bars.append(Bar(phase, round(x * scale, 2), round(value * scale, 2), value))
            x += value
        words = ", ".join(f"{bar.phase} {bar.seconds:.1f} s" for bar in bars) or "not started"
        rows.append(
            TimelineRow(segment.index, segment.state, bars, f"session {segment.index}: {words}")
        )
    return Timeline(rows, width, longest)


@dataclass(frozen=True)
class LossCurve:
    points: str  # an SVG polyline's points, "x,y x,y ..."
    boundaries: list[tuple[float, int]]  # (x, step) where a new session began
    width: float
    height: float
    y_min: float
    y_max: float
    summary: str  # the curve in words, for screen readers


def loss_curve(
    metrics: Sequence[MetricPoint],
    segments: Sequence[SegmentOut],
    total_steps: int,
    key: str = "loss",
    width: float = 600.0,
    height: float = 200.0,
) -> LossCurve | None:
    """The loss against steps across segments, with a mark where each later session began."""
    series = [(point.step, point.values[key]) for point in metrics if key in point.values]
    if not series:
        return None
    low = min(value for _, value in series)
    high = max(value for _, value in series)
    span = (high - low) or 1.0
    x_scale = width / max(total_steps, 1)

    def y(value: float) -> float:
        return round(height - (value - low) / span * height, 2)

    points = " ".join(f"{round(step * x_scale, 2)},{y(value)}" for step, value in series)
    # A retried session starts where the failed one did: one mark per starting step.
    boundaries = sorted(
        {
            (round(segment.start_step * x_scale, 2), segment.start_step)
            for segment in segments
            if segment.index > 0 and segment.start_step > 0
        }
    )
    first, last = series[0], series[-1]
    summary = (
        f"{key} went from {first[1]:.4g} at step {first[0]} to {last[1]:.4g} at step {last[0]}, "
        f"across {len({point.segment_index for point in metrics})} session(s)"
    )
    return LossCurve(points, boundaries, width, height, low, high, summary)
