"""Where a job's session time went: each phase's seconds, per session and in total, and the share
of it spent training. Pure, over the API's own models (the CLI and the page both read it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from orchestrator.wire import LiveProgress, SegmentOut

# "running": a session still under way, whose phases are known only once it ends.
PHASES = ("startup", "load", "train", "save", "upload", "idle", "running")


def phase_seconds(
    segment: SegmentOut, now: datetime, live: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Seconds of each phase; idle is the session's wall time the worker did not account for.
    A session still under way shows what its heartbeat reported (`live`: start-up, load and
    train so far), and the rest of its time as "running"."""
    timings = segment.timings
    if timings is None:
        if segment.launched_at is None:
            return {}
        end = segment.ended_at or now
        elapsed = max(0.0, (end - segment.launched_at).total_seconds())
        known = (
            {phase: live.get(phase, 0.0) for phase in ("startup", "load", "train")} if live else {}
        )
        return {**known, "running": max(0.0, elapsed - sum(known.values()))}
    measured = {
        "startup": timings.startup or 0.0,
        "load": timings.load or 0.0,
        "train": timings.train or 0.0,
        "save": timings.save or 0.0,
        "upload": timings.upload or 0.0,
    }
    wall = timings.session
    if wall is None and segment.launched_at is not None and segment.ended_at is not None:
        wall = (segment.ended_at - segment.launched_at).total_seconds()
    measured["idle"] = max(0.0, (wall or 0.0) - sum(measured.values()))
    return measured


def live_phases(live: LiveProgress | None, segment: SegmentOut) -> Mapping[str, float] | None:
    """The running segment's heartbeat phases, if `live` is its progress."""
    if live is None or live.segment_index != segment.index:
        return None
    return live.phases


@dataclass(frozen=True)
class QuotaUse:
    phases: dict[str, float]  # seconds of each phase over all sessions, in PHASES order
    total: float
    sessions: int

    @property
    def trained_share(self) -> float | None:
        """The share of session time spent in training steps."""
        return self.phases.get("train", 0.0) / self.total if self.total > 0 else None

    def describe(self) -> str:
        """E.g. '512 s in 4 sessions: startup 40 s (8 %), ..., 78 % of session time trained'."""
        if self.total <= 0:
            return "no session time used yet"
        parts = [
            f"{phase} {seconds:.0f} s ({100 * seconds / self.total:.0f} %)"
            for phase, seconds in self.phases.items()
            if seconds > 0
        ]
        share = self.trained_share or 0.0
        sessions = "session" if self.sessions == 1 else "sessions"
        return (
            f"{self.total:.0f} s in {self.sessions} {sessions}: {', '.join(parts)}; "
            f"{100 * share:.0f} % of session time trained"
        )


def quota_use(
    segments: Sequence[SegmentOut], now: datetime, live: LiveProgress | None = None
) -> QuotaUse:
    totals = dict.fromkeys(PHASES, 0.0)
    used = 0
    for segment in segments:
        seconds = phase_seconds(segment, now, live_phases(live, segment))
        used += bool(seconds)
        for phase, value in seconds.items():
            totals[phase] += value
    return QuotaUse(totals, sum(totals.values()), used)
