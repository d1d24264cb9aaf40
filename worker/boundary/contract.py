"""The worker contract: the segment spec a session reads and the result it writes.

Shared by the orchestrator (which writes specs and reads results) and the worker (which does the
reverse). Part of worker.boundary: standard library only.
"""

from __future__ import annotations

import enum
import json
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from worker.boundary.paths import WORKING_DIR

# The deadline margin's defaults, for the job spec (orchestrator/spec.py) and the segment alike.
DEFAULT_K_STEPS = 1.25
DEFAULT_SAFETY_SECONDS = 1.0


class Outcome(enum.StrEnum):
    """How a segment ended, as the worker reports it in result.json."""

    COMPLETED = "completed"  # reached total_steps; checkpoint committed
    DEADLINE = "deadline"  # stopped before the session deadline; checkpoint committed
    STOPPED = "stopped"  # stop flag (SIGTERM) set; checkpoint committed
    FAILED = "failed"  # an exception; nothing committed
    # A non-finite loss or gradient norm on N steps in a row: stopped, the diverged state not
    # committed; the error says where, and which checkpoint is the last good one.
    DIVERGED = "diverged"
    # The job's owner cancelled it through the control channel: ended, nothing committed.
    CANCELLED = "cancelled"
    REJECTED = "rejected"  # the resume checkpoint was missing, corrupt or stale


# The worker's start-up progress lines in the session log begin with STARTUP_LOG; READY_LOG marks
# the end of start-up. A session killed before READY_LOG died starting (backends say so).
STARTUP_LOG = "start-up:"
READY_LOG = f"{STARTUP_LOG} ready to train"

# The outcomes that leave a committed checkpoint behind.
COMMITTED_OUTCOMES = frozenset({Outcome.COMPLETED, Outcome.DEADLINE, Outcome.STOPPED})


@dataclass(frozen=True)
class CheckpointRef:
    """One committed checkpoint of a job: the one to resume from, or the one a segment left.

    A resume checkpoint's manifest must say exactly this; anything else is stale or foreign.
    """

    job_id: str
    segment_index: int
    step: int


@dataclass(frozen=True)
class Estimates:
    """Costs measured in earlier segments, used by the deadline rule before this one measures."""

    save_seconds: float | None = None
    upload_seconds: float = 0.0
    exit_seconds: float = 0.0
    # The previous segment's step_time_ema: guards the first step, before this one measures.
    step_seconds: float | None = None
    # The size of the checkpoint this segment starts from (or, for the first, the size predicted
    # for step 0): a self-chaining kernel measures the growth to its own checkpoint from it.
    checkpoint_bytes: int | None = None


@dataclass(frozen=True)
class MarginPolicy:
    """Deadline margin: stop when now + k*step + save + upload + exit + safety > deadline.

    `step` is the larger of the step-time EMA and the slowest of the recent steps
    (worker.deadline), so k is headroom over the slowest recent steps, not a multiple of the mean.
    """

    k_steps: float = DEFAULT_K_STEPS
    safety_seconds: float = DEFAULT_SAFETY_SECONDS


@dataclass(frozen=True)
class WatchdogPolicy:
    """The session's own health checks (worker.watchdog).

    Hung: no step ended within max(hang_floor_seconds, hang_multiple * step time); 0 turns the
    hang watch off. Diverged: a non-finite loss or grad norm on divergence_steps steps in a row.
    """

    hang_multiple: float = 10.0
    hang_floor_seconds: float = 600.0
    divergence_steps: int = 3

    def hang_bound(self, step_seconds: float | None) -> float:
        """Seconds without a finished step after which a session counts as hung: the session's
        watchdog ends it then, and the orchestrator shows a heartbeat that old as stalled."""
        if step_seconds is None:
            return self.hang_floor_seconds
        return max(self.hang_floor_seconds, self.hang_multiple * step_seconds)


@dataclass(frozen=True)
class SegmentSpec:
    """Everything a session needs to run one segment of a job."""

    job_id: str
    segment_index: int
    trainer: str  # import path "package.module:ClassName"
    config: dict[str, Any]
    total_steps: int
    limit_seconds: float
    seed: int = 0
    margin: MarginPolicy = field(default_factory=MarginPolicy)
    estimates: Estimates = field(default_factory=Estimates)
    # Relative to the session root; None for the first segment.
    resume_path: str | None = None
    expect: CheckpointRef | None = None
    output_dir: str = WORKING_DIR
    # Worker processes (ranks) in the session: one per GPU on a t4x2, or CPU ranks over gloo.
    nproc: int = 1
    watchdog: WatchdogPolicy = field(default_factory=WatchdogPolicy)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SegmentSpec:
        data = dict(data)
        data["margin"] = MarginPolicy(**data.get("margin", {}))
        data["estimates"] = Estimates(**data.get("estimates", {}))
        data["watchdog"] = WatchdogPolicy(**data.get("watchdog", {}))
        expect = data.get("expect")
        data["expect"] = CheckpointRef(**expect) if expect else None
        return cls(**data)

    @classmethod
    def read(cls, path: Path) -> SegmentSpec:
        return cls.from_dict(json.loads(path.read_text()))


@dataclass
class Timings:
    """Seconds spent in each phase of a session, measured by the worker."""

    startup: float = 0.0  # process start until the worker's main began (imports, interpreter)
    load: float = 0.0  # trainer setup plus checkpoint load
    train: float = 0.0  # inside training steps
    save: float = 0.0  # checkpoint commit
    upload: float = 0.0  # publishing the checkpoint (Kaggle); 0 locally
    # pip-installing the job's requirements before the worker started (Kaggle): a part of
    # `startup`, which a Kaggle session counts from its origin
    install: float = 0.0
    total: float = 0.0  # process start until result.json was written


@dataclass
class SegmentResult:
    """result.json: what a session reports back."""

    job_id: str
    segment_index: int
    outcome: str
    start_step: int
    end_step: int
    limit_seconds: float
    timings: Timings = field(default_factory=Timings)
    step_time_ema: float | None = None
    metrics: list[dict[str, float]] = field(default_factory=list)
    model_digest: str | None = None
    error: str | None = None
    # How the session installed the job's requirements (worker/wheelhouse.py: "offline" from
    # the wheel set, "built" it, or "index"); None without requirements.
    requirements: str | None = None

    @property
    def committed(self) -> bool:
        return self.outcome in COMMITTED_OUTCOMES

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SegmentResult:
        data = dict(data)
        data["timings"] = Timings(**data.get("timings", {}))
        return cls(**data)

    @classmethod
    def read(cls, path: Path) -> SegmentResult:
        return cls.from_dict(json.loads(path.read_text()))

    def write(self, path: Path) -> None:
        write_json_atomic(path, asdict(self))


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to a temp file, fsync, then rename, so readers never see half a file. The temp
    file is this writer's own: two writers of one file (a supervisor and its launcher both write
    supervisor.pid) never truncate or rename each other's."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
