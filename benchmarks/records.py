"""What one way's run measured: per-session records and the figures derived from them."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class SessionRecord:
    """One session, as measured from the inside (timings) and the outside (wall time)."""

    wall: float  # session start to its end, as the supervisor / controller saw it
    first_step: float | None  # process start until the first training step began
    load: float  # building the trainer and loading the checkpoint (inside first_step)
    train: float  # seconds inside training steps
    saves: list[float]  # seconds of each checkpoint save
    start_step: int
    trained_to: int  # the step count reached before the session ended
    kept_to: int  # the step the next session resumes from (the last committed save)
    outcome: str

    @property
    def steps_trained(self) -> int:
        return self.trained_to - self.start_step

    @property
    def lost_steps(self) -> int:
        """Steps trained in this session that the next one trains again."""
        return max(0, self.trained_to - self.kept_to)


@dataclass
class WayResult:
    key: str
    title: str
    sessions: list[SessionRecord]
    total_wall: float
    final_step: int
    digest: str | None
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def boundary_losses(self) -> list[int]:
        """Lost steps at each boundary, i.e. for every session but the last."""
        return [session.lost_steps for session in self.sessions[:-1]]

    @property
    def step_seconds(self) -> float:
        steps = sum(s.steps_trained for s in self.sessions)
        return sum(s.train for s in self.sessions) / steps if steps else 0.0

    @property
    def session_wall(self) -> float:
        return sum(s.wall for s in self.sessions)

    @property
    def in_step_share(self) -> float:
        """Share of all session time spent inside training steps, kept or not."""
        wall = self.session_wall
        return sum(s.train for s in self.sessions) / wall if wall else 0.0

    @property
    def kept_share(self) -> float:
        """Share of session time spent in steps that count toward the final model."""
        wall = self.session_wall
        return self.final_step * self.step_seconds / wall if wall else 0.0

    def median_of(self, name: str) -> float | None:
        values = [getattr(s, name) for s in self.sessions if getattr(s, name) is not None]
        return statistics.median(values) if values else None

    @property
    def median_save(self) -> float | None:
        saves = [save for s in self.sessions for save in s.saves]
        return statistics.median(saves) if saves else None

    @property
    def saves_per_session(self) -> float:
        return sum(len(s.saves) for s in self.sessions) / max(1, len(self.sessions))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["derived"] = {
            "sessions": len(self.sessions),
            "boundary_losses": self.boundary_losses,
            "step_seconds": self.step_seconds,
            "session_wall": self.session_wall,
            "in_step_share": self.in_step_share,
            "kept_share": self.kept_share,
            "median_first_step": self.median_of("first_step"),
            "median_load": self.median_of("load"),
            "median_save": self.median_save,
            "saves_per_session": self.saves_per_session,
        }
        return data
