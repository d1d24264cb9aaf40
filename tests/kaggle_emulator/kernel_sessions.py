"""A kernel session's record and the rule that turns a finished run into a KernelWorkerStatus."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.backends.local.supervisor import SessionExit
from tests.kaggle_emulator.accelerators import Accelerator


class WorkerStatus(enum.StrEnum):
    """The names of kagglesdk's KernelWorkerStatus."""

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    COMPLETE = "COMPLETE"
    ERROR = "ERROR"
    CANCEL_REQUESTED = "CANCEL_REQUESTED"
    CANCEL_ACKNOWLEDGED = "CANCEL_ACKNOWLEDGED"


ACTIVE = frozenset({WorkerStatus.QUEUED, WorkerStatus.RUNNING, WorkerStatus.CANCEL_REQUESTED})


@dataclass(frozen=True)
class Mount:
    """A directory copied into the session's input/<name>/ before it starts."""

    name: str
    source: Path


@dataclass
class KernelSession:
    id: int
    kernel_id: int
    kernel_ref: str
    owner: str
    version: int
    accelerator: Accelerator
    limit_seconds: float
    root: Path
    script: str
    mounts: list[Mount]
    queued_at: float
    start_after: float
    api_url: str  # where the kernel was pushed: what it calls back (BATON_KAGGLE_API_URL)
    machine: str = "none"  # what the session actually runs on (accelerators.machine_for)
    status: WorkerStatus = WorkerStatus.QUEUED
    started_at: float | None = None
    ended_at: float | None = None
    failure_message: str | None = None
    output_kept: bool = False
    cancel_wanted: bool = False
    # Cut at its limit: CANCEL_ACKNOWLEDGED with its partial output (first_contact.py).
    cut_keeps_output: bool = False
    over_working_cap: bool = False  # stopped for writing past /kaggle/working's cap
    working_checked_at: float = float("-inf")
    history: list[WorkerStatus] = field(default_factory=lambda: [WorkerStatus.QUEUED])

    def move(self, status: WorkerStatus) -> None:
        self.status = status
        self.history.append(status)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE


def outcome(
    result: SessionExit, limit_seconds: float, cut_keeps_output: bool = False
) -> tuple[WorkerStatus, str | None]:
    """The status a finished run reports, and its failure message."""
    if result.cancelled or (result.timed_out and cut_keeps_output):
        return WorkerStatus.CANCEL_ACKNOWLEDGED, None
    if result.timed_out:
        return WorkerStatus.ERROR, (
            f"Your notebook exceeded its session timeout of {limit_seconds:g} seconds and was "
            "stopped. Its output was not saved."
        )
    if result.exit_code != 0:
        return WorkerStatus.ERROR, f"The notebook exited with code {result.exit_code}."
    return WorkerStatus.COMPLETE, None
