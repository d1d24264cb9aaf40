"""What a segment's `timings` JSON column holds: the worker's phase timings (worker/boundary/
contract.py `Timings`) plus what the orchestrator measured around the session. Readers go through
`SessionTimings`, never through the column's keys."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from worker.boundary.contract import Timings


@dataclass(frozen=True)
class SessionTimings:
    startup: float | None = None
    load: float | None = None
    train: float | None = None
    save: float | None = None
    upload: float | None = None
    install: float | None = None  # the requirements' pip install, a part of startup
    total: float | None = None
    session: float | None = None  # the backend's wall time for the whole session
    step_ema: float | None = None  # moving average of one training step
    # How the checkpoint crossed this boundary ("kernel", "orchestrator") and the checkpoint
    # bytes through the orchestrator's link for it (collect's download plus launch's upload).
    transport: str | None = None
    link_bytes: int | None = None
    # The committed checkpoint's size (its manifest): with `upload`, the rate it was published at.
    checkpoint_bytes: int | None = None
    # How the session installed the job's requirements ("offline" from the wheel set, "built"
    # it, "index"; worker/wheelhouse.py); None without requirements.
    install_from: str | None = None

    @classmethod
    def measured(
        cls, worker: Timings, session: float | None, step_ema: float | None
    ) -> SessionTimings:
        return cls(**asdict(worker), session=session, step_ema=step_ema)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> SessionTimings | None:
        """The stored column, or None where the segment measured nothing."""
        if not data:
            return None
        return cls(**{key: value for key, value in data.items() if key in _FIELDS})

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def setup(self) -> float:
        """Process start and trainer setup with checkpoint load."""
        return (self.startup or 0.0) + (self.load or 0.0)

    @property
    def tail(self) -> float:
        """Checkpoint commit and its upload."""
        return (self.save or 0.0) + (self.upload or 0.0)


# The keys from_json keeps (read once: the job list reads a column per job).
_FIELDS = frozenset(field.name for field in fields(SessionTimings))
