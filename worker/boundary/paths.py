"""The layout of a session's directory, owned here and nowhere else (like submitit's JobPaths).

A session is laid out like a Kaggle session: `input/` (read-only data, the resume checkpoint
in `input/checkpoint`), `working/` (the output: `checkpoint/`, `result.json`, `heartbeat.json`),
plus `segment.json` at the root. A local session also holds its supervisor's files: the plan
(`session.json`), the outcome (`status.json`), `supervisor.pid`, `launch.lock` and `log.txt`; a
Slurm session its batch script, `log.txt` and the two records the script writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

INPUT_DIR = "input"
WORKING_DIR = "working"
SEGMENT_FILE = "segment.json"
RESULT_FILE = "result.json"
# Live progress the worker rewrites atomically while it trains: step, loss, step_seconds, at.
HEARTBEAT_FILE = "heartbeat.json"
CHECKPOINT_DIR = "checkpoint"
MANIFEST_FILE = "manifest.json"
# The local supervisor's files (orchestrator/backends/local/supervisor.py).
SESSION_FILE = "session.json"
STATUS_FILE = "status.json"
PID_FILE = "supervisor.pid"
LAUNCH_LOCK_FILE = "launch.lock"
LOG_FILE = "log.txt"
# A Slurm session's files (orchestrator/backends/slurm/): the batch script sbatch runs, what the
# job wrote on starting (its job id and the allocation's end time) and on ending (exit code).
SLURM_SCRIPT_FILE = "slurm-job.sh"
SLURM_STARTED_FILE = "slurm-started.json"
SLURM_ENDED_FILE = "slurm-ended.json"
# The local control channel (worker/control.py): the supervisor writes a command, the worker
# reads it between steps.
CONTROL_FILE = "control"
# worker.torchrun's record of the rank that failed first, and each failing rank's own reason.
FIRST_FAILURE_FILE = "first-failure.json"
RANK_FAILURE_FILE = "rank{rank}-failure.txt"
# Where a resumed segment finds its checkpoint, relative to the session root (segment.json).
RESUME_PATH = f"{INPUT_DIR}/{CHECKPOINT_DIR}"


@dataclass(frozen=True)
class SessionPaths:
    """Every path of one session's directory, from its root."""

    root: Path

    @property
    def input(self) -> Path:
        return self.root / INPUT_DIR

    @property
    def resume_checkpoint(self) -> Path:
        return self.root / RESUME_PATH

    @property
    def working(self) -> Path:
        return self.root / WORKING_DIR

    @property
    def checkpoint(self) -> Path:
        """The checkpoint this session commits."""
        return self.working / CHECKPOINT_DIR

    @property
    def result(self) -> Path:
        return self.working / RESULT_FILE

    @property
    def heartbeat(self) -> Path:
        return self.working / HEARTBEAT_FILE

    @property
    def segment(self) -> Path:
        return self.root / SEGMENT_FILE

    @property
    def session(self) -> Path:
        """The supervisor's plan: the command, its limit, its environment."""
        return self.root / SESSION_FILE

    @property
    def status(self) -> Path:
        return self.root / STATUS_FILE

    @property
    def pid(self) -> Path:
        return self.root / PID_FILE

    @property
    def launch_lock(self) -> Path:
        return self.root / LAUNCH_LOCK_FILE

    @property
    def log(self) -> Path:
        return self.root / LOG_FILE

    @property
    def slurm_script(self) -> Path:
        return self.root / SLURM_SCRIPT_FILE

    @property
    def slurm_started(self) -> Path:
        return self.root / SLURM_STARTED_FILE

    @property
    def slurm_ended(self) -> Path:
        return self.root / SLURM_ENDED_FILE

    @property
    def control(self) -> Path:
        """Commands for the running session (pause, cancel); the supervisor writes it."""
        return self.root / CONTROL_FILE

    @property
    def first_failure(self) -> Path:
        return self.working / FIRST_FAILURE_FILE

    def rank_failure(self, rank: int) -> Path:
        return self.working / RANK_FAILURE_FILE.format(rank=rank)
