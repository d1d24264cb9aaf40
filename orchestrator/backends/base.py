"""The interface every backend implements, and the only errors a backend may raise.

The error contract: every `Backend` method raises only `Transient` (try again later, after
`retry_after` seconds if the service said so), `Rejected` (final for this launch or session) or
`Gone` (the session, kernel or dataset no longer exists). `AccountRefused`, a `Rejected` from
a launch, says the account itself may not run the job (no retry can help): the job fails at
once. A backend wraps whatever its client library raises at its own boundary, with the
message. Anything else escaping a backend is a bug in Baton: the engine fails the job once with
`internal error (…)` instead of looping on it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from worker.boundary.contract import CheckpointRef, SegmentResult, SegmentSpec
from worker.boundary.errors import AccountRefused, BackendError, Gone, Rejected, Transient
from worker.boundary.heartbeat import Heartbeat
from worker.boundary.manifest import Manifest

__all__ = [
    "AccountRefused",
    "Backend",
    "BackendError",
    "Collected",
    "Gone",
    "LaunchRequest",
    "Quota",
    "Rejected",
    "SessionStatus",
    "Slot",
    "Transient",
]


class SessionStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"  # ended; collect to learn how
    LOST = "lost"  # the backend no longer knows it, or it died without a trace


@dataclass(frozen=True)
class Slot:
    """A pool of concurrent sessions a launch needs a place in: `limit` at once per `key`.

    Jobs whose backends share a key compete for the same places (one host's local slots, one
    Kaggle account's GPU sessions). Admission counts the active segments holding the key.
    """

    key: str
    limit: int


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
    # How the checkpoint moved to where the next session reads it (worker/boundary/transport.py)
    # and the checkpoint bytes that crossed the orchestrator's link for it; None: not measured.
    transport: str | None = None
    link_bytes: int | None = None


@dataclass(frozen=True)
class Quota:
    seconds_left: float
    refresh_at: datetime | None


class Backend(Protocol):
    name: str
    # Seconds between two looks at a running session: fast locally, 30 s or more on Kaggle.
    poll_seconds: float
    # Past launch + limit + this much, a session reported running is killed and failed by the
    # engine, as a backstop to the backend's own limit; None where queue time makes launch time
    # meaningless (the backend then judges staleness itself).
    overrun_slack_seconds: float | None

    @property
    def slot(self) -> Slot:
        """The pool this backend's sessions take a place in (capacity is admission)."""
        ...

    def launch(self, request: LaunchRequest) -> str:
        """Start the session; returns its handle. Never called twice for one launch_id."""
        ...

    def find(self, launch_id: str) -> str | None:
        """The handle of a session already launched under this id, if any (crash recovery).

        Whatever `find` looks for must exist before the session can start: a launch that
        `find` cannot see has not started and never will.
        """
        ...

    def status(self, handle: str) -> SessionStatus: ...

    def collect(self, handle: str, store: Path) -> Collected:
        """Fetch result.json and move a committed, verified checkpoint into `store`. Idempotent."""
        ...

    def cancel(self, handle: str) -> bool:
        """Stop the session. True if it is known to be ending; False if the backend cannot stop
        it (it may run on until its own limit), which the engine tells the user."""
        ...

    def request_stop(self, handle: str) -> None:
        """Ask the session to commit a checkpoint and end early, where the backend can."""
        ...

    def quota(self) -> Quota | None:
        """Accelerator time left, or None where there is no quota."""
        ...

    def log_file(self, handle: str) -> Path | None:
        """Where this side can read the session's log (backends/log_tail.py reads its end or
        its lines from an offset), or None where none is here (yet)."""
        ...

    def queue_reason(self, handle: str) -> str | None:
        """Why a launched session still waits in the backend's own queue (Slurm's pending
        reason), or None where it does not wait or the backend has no queue of its own."""
        ...

    def progress(self, handle: str) -> Heartbeat | None:
        """The running session's latest heartbeat (worker.boundary.heartbeat), or None
        where nothing reaches into a running session (Kaggle)."""
        ...

    def fetch_checkpoint(self, stored: Path, expect: CheckpointRef) -> int:
        """Turn a stored *stub* (a checkpoint whose files stayed on this backend's side,
        worker/boundary/transport.py) into the checkpoint itself, every file verified against
        the manifest; the bytes fetched, 0 when the store holds the files already.
        CorruptCheckpoint when the copy there is unusable or gone."""
        ...
