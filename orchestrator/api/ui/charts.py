"""Geometry for the status page's server-rendered SVG: the session timeline and metric charts.

Pure functions from view models to shapes; the templates only draw what these return.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from orchestrator.quota_use import PHASES, live_phases, phase_seconds
from orchestrator.wire import LiveProgress, MetricPoint, SegmentOut

__all__ = ["PHASES", "live_value", "metric_chart", "metric_keys", "timeline"]


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


def timeline(
    segments: Sequence[SegmentOut],
    now: datetime,
    width: float = 600.0,
    live: LiveProgress | None = None,
) -> Timeline:
    """One row per session, every bar drawn to the same scale: the longest session limit."""
    phases = [phase_seconds(segment, now, live_phases(live, segment)) for segment in segments]
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
class Point:
    x: float
    y: float
    title: str  # shown on hover (SVG <title>) and read by screen readers


@dataclass(frozen=True)
class Series:
    label: str
    css: str
    points: str  # an SVG polyline's points, "x,y x,y ..."
    marks: list[Point]  # hover targets, at most MAX_MARKS of them


@dataclass(frozen=True)
class Tick:
    at: float
    text: str


@dataclass(frozen=True)
class MetricChart:
    key: str
    series: list[Series]
    boundaries: list[tuple[float, str]]  # (x, label) where a later session began
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    live: Point | None  # the running session's latest value, before it commits
    width: float
    height: float
    summary: str  # the chart in words, for screen readers


MAX_MARKS = 200
TICKS = 5


def metric_keys(metrics: Sequence[MetricPoint], live: LiveProgress | None = None) -> list[str]:
    """Every scalar the trainer logged, loss first: committed, or live in the running session."""
    keys = {key for point in metrics for key in point.values}
    keys |= set(live.metrics or {}) if live is not None else set()
    return sorted(keys, key=lambda key: (key != "loss", key))


def live_value(live: LiveProgress | None, key: str) -> tuple[int, float] | None:
    """The running session's latest (step, value) of `key`, before it commits."""
    if live is None:
        return None
    value = (live.metrics or {}).get(key)
    if value is None and key == "loss":
        value = live.loss  # a heartbeat from before the metrics were carried
    return (live.step, value) if value is not None else None


def _ticks(low: float, high: float, to_px: Callable[[float], float], fmt: str) -> list[Tick]:
    return [
        Tick(
            to_px(low + (high - low) * i / (TICKS - 1)),
            fmt.format(low + (high - low) * i / (TICKS - 1)),
        )
        for i in range(TICKS)
    ]


def metric_chart(
    metrics: Sequence[MetricPoint],
    segments: Sequence[SegmentOut],
    total_steps: int,
    key: str = "loss",
    *,
    live: tuple[int, float] | None = None,
    compare: tuple[str, Sequence[MetricPoint]] | None = None,
    width: float = 600.0,
    height: float = 200.0,
) -> MetricChart | None:
    """`key` against steps across sessions, each later session's start marked and labelled;
    with `live`, the running session's latest value; with `compare`, another job's series."""
    own = [(p.step, p.values[key]) for p in metrics if key in p.values]
    other = [(p.step, p.values[key]) for p in compare[1] if key in p.values] if compare else []
    every = own + other + ([live] if live else [])
    if not every:
        return None
    low = min(value for _, value in every)
    high = max(value for _, value in every)
    span = (high - low) or 1.0
    steps = max([total_steps] + [step for step, _ in every])
    x_scale = width / max(steps, 1)

    def x(step: float) -> float:
        return round(step * x_scale, 2)

    def y(value: float) -> float:
        return round(height - (value - low) / span * height, 2)

    def series(label: str, css: str, values: list[tuple[int, float]]) -> Series:
        stride = max(1, len(values) // MAX_MARKS)
        marks = [
            Point(x(step), y(value), f"{label}: step {step}, {key} {value:.4g}")
            for step, value in values[::stride]
        ]
        return Series(label, css, " ".join(f"{x(s)},{y(v)}" for s, v in values), marks)

    lines = [series("this job", "curve", own)] if own else []
    if compare and other:
        lines.append(series(compare[0], "curve-compare", other))
    # A retried session starts where the failed one did: one mark per starting step.
    starts: dict[int, int] = {}
    for segment in segments:
        if segment.index > 0 and segment.start_step > 0:
            starts.setdefault(segment.start_step, segment.index)
    boundaries = [(x(step), f"session {index}") for step, index in sorted(starts.items())]
    live_point = (
        Point(x(live[0]), y(live[1]), f"now: step {live[0]}, {key} {live[1]:.4g}") if live else None
    )
    summary = f"{key}: no committed value yet"
    if own:
        (s0, v0), (s1, v1) = own[0], own[-1]
        sessions = len({point.segment_index for point in metrics if key in point.values})
        summary = (
            f"{key} went from {v0:.4g} at step {s0} to {v1:.4g} at step {s1}, across "
            f"{sessions} session(s)"
        )
    if compare and other:
        summary += f"; {compare[0]} ends at {other[-1][1]:.4g} at step {other[-1][0]}"
    return MetricChart(
        key,
        lines,
        boundaries,
        _ticks(0, steps, x, "{:.0f}"),
        _ticks(low, high, y, "{:.3g}"),
        live_point,
        width,
        height,
        summary,
    )
