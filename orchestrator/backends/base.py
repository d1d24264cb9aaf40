"""The interface every backend implements: launch, find, status, collect, cancel, stop, quota."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from worker.contract import SegmentResult, SegmentSpec
from worker.manifest import Manifest


class TransientBackendError(Exception):
    """Worth retrying on the next reconcile tick (network, rate limit, 5xx)."""


class LaunchRejected(Exception):
    """The backend refused the launch for good; counts as a failed segment."""


class SessionStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"  # ended; collect to learn how
    LOST = "lost"  # the backend no longer knows it, or it died without a trace


@dataclass(frozen=True)
class LaunchRequest:
    launch_id: str  # unique per segment; the backend's idempotency key
    spec: SegmentSpec
    resume_from: Path | None  # a committed checkpoint directory in the orchestrator's store


@dataclass(frozen=True)
class Collected:
    """What a finished session left: its result and, if committed, the verified checkpoint."""

    result: SegmentResult | None
    manifest: Manifest | None
    checkpoint: Path | None  # where the checkpoint now lives in the orchestrator's store
    session_seconds: float | None  # wall time the backend measured
    problem: str | None  # why the session's output is unusable, if it is


@dataclass(frozen=True)
class Quota:
    seconds_left: float
    refresh_at: datetime | None


class Backend(Protocol):
    name: str

    def launch(self, request: LaunchRequest) -> str:
        """Start the session; returns its handle. Never called twice for one launch_id."""
        ...

    def find(self, launch_id: str) -> str | None:
        """The handle of a session already launched under this id, if any (crash recovery)."""
        ...

    def status(self, handle: str) -> SessionStatus: ...

    def collect(self, handle: str, store: Path) -> Collected:
        """Fetch result.json and move a committed, verified checkpoint into `store`. Idempotent."""
        ...

    def cancel(self, handle: str) -> None: ...

    def request_stop(self, handle: str) -> None:
        """Ask the session to commit a checkpoint and end early, where the backend can."""
        ...

    def quota(self) -> Quota | None:
        """Accelerator time left, or None where there is no quota."""
        ...

    def log(self, handle: str) -> str | None:
        """The session's log as far as this side can see it, or None."""
        ...
