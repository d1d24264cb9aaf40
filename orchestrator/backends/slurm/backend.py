"""The Slurm backend: a segment is one batch job in a session directory on the shared filesystem.

The session directory is laid out as a local session's (worker.boundary.paths), under
`sessions_dir`, which the submit host and every compute node must see at the same path: the
resume checkpoint goes in before `sbatch`, and the committed checkpoint and `result.json` come
back through it, in the same format and manifest as on the other backends.

A handle is `<launch id>@<Slurm job id>`. The launch id is also the job's name (with a prefix)
and comment, so `find` adopts a job submitted just before an orchestrator crash.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.backends.base import (
    Collected,
    Gone,
    LaunchRequest,
    Quota,
    Rejected,
    SessionStatus,
    Slot,
    Transient,
)
from orchestrator.backends.local.backend import link_or_copy_tree
from orchestrator.backends.log_tail import last_line
from orchestrator.backends.slurm.commands import (
    ENDED_STATES,
    PENDING_STATES,
    JobRecord,
    SlurmJobs,
)
from orchestrator.backends.slurm.script import batch_script, job_name, sbatch_options
from orchestrator.spec import SlurmSpec
from worker.boundary.contract import CheckpointRef, SegmentResult
from worker.boundary.heartbeat import Heartbeat
from worker.boundary.manifest import CorruptCheckpoint, verify_checkpoint
from worker.boundary.paths import SessionPaths
from worker.control import Command
from worker.reasons import one_line

# How often a running segment is looked at: one squeue/scontrol call each time.
POLL_SECONDS = 5.0
# Segments one job source may have in Slurm at once; Slurm's own queue orders the rest.
DEFAULT_SLOTS = 64


@dataclass(frozen=True)
class SlurmHandle:
    launch_id: str
    job_id: str

    def __str__(self) -> str:
        return f"{self.launch_id}@{self.job_id}"

    @classmethod
    def parse(cls, text: str) -> SlurmHandle:
        launch_id, sep, job_id = text.rpartition("@")
        if not sep or not job_id.isdigit():
            raise Gone(f"not a Slurm handle: {text!r}")
        return cls(launch_id, job_id)


class SlurmBackend:
    name = "slurm"
    # Queue time makes launch time meaningless: Slurm enforces the walltime itself.
    overrun_slack_seconds: float | None = None

    def __init__(
        self,
        sessions_dir: Path,
        options: SlurmSpec,
        jobs: SlurmJobs,
        *,
        python: str | None = None,
        trainer_paths: Sequence[Path] = (),
        poll_seconds: float = POLL_SECONDS,
        slots: int = DEFAULT_SLOTS,
    ) -> None:
        # Absolute: the batch script and sbatch --chdir name it from the compute node.
        self.sessions_dir = sessions_dir.resolve()
        self.options = options
        self.jobs = jobs
        self.python = python or sys.executable
        self.trainer_paths = [str(path) for path in trainer_paths]
        self.poll_seconds = poll_seconds
        partition = options.partition or "default"
        self.slot = Slot(f"slurm:{options.account or '-'}:{partition}", slots)
        # The last record `status` read per handle, for `progress` (a pending job's reason).
        self._seen: dict[str, JobRecord | None] = {}

    def _paths(self, launch_id: str) -> SessionPaths:
        return SessionPaths(self.sessions_dir / launch_id)

    def launch(self, request: LaunchRequest) -> str:
        try:
            options = self._prepare(request)
        except OSError as exc:
            # The shared filesystem is full, unmounted or refusing: nothing was submitted.
            raise Transient(f"cannot write the session directory: {exc}") from exc
        job_id = self.jobs.submit(options, str(self._paths(request.launch_id).slurm_script))
        return str(SlurmHandle(request.launch_id, job_id))

    def _prepare(self, request: LaunchRequest) -> list[str]:
        """Write the session directory and the batch script; the sbatch options."""
        paths = self._paths(request.launch_id)
        # The engine calls launch only after `find` saw no job under this launch id: whatever a
        # launch that died before sbatch left here is stale.
        if paths.root.exists():
            shutil.rmtree(paths.root)
        paths.input.mkdir(parents=True, mode=0o700)
        paths.working.mkdir(mode=0o700)
        spec = request.spec
        if request.resume_from is not None:
            if not request.resume_from.is_dir():
                raise Rejected("the checkpoint to resume from is missing from the store")
            link_or_copy_tree(request.resume_from, paths.resume_checkpoint)
        paths.segment.write_text(spec.to_json())
        python_path = os.pathsep.join(
            filter(None, [*self.trainer_paths, os.getcwd(), os.environ.get("PYTHONPATH")])
        )
        env = {"PYTHONPATH": python_path, "PYTHONUNBUFFERED": "1"}
        if "HOME" in os.environ:
            env["HOME"] = os.environ["HOME"]
        paths.slurm_script.write_text(
            batch_script(
                paths,
                python=self.python,
                limit_seconds=spec.limit_seconds,
                env=env,
                extra_path=[str(Path(self.python).parent)],
            )
        )
        paths.slurm_script.chmod(0o700)
        return sbatch_options(request.launch_id, paths, self.options, spec.limit_seconds)

    def find(self, launch_id: str) -> str | None:
        # The job exists in slurmctld from the moment sbatch returns; its record ages out
        # MinJobAge after it ends, when the job's own start record still names it.
        mine = [r for r in self.jobs.named(job_name(launch_id)) if r.comment in ("", launch_id)]
        if mine:
            # One job per launch id; should there be more, the live one, else the newest.
            newest = max(mine, key=lambda r: (r.state not in ENDED_STATES, int(r.job_id)))
            return str(SlurmHandle(launch_id, newest.job_id))
        started = _read_json(self._paths(launch_id).slurm_started)
        if started is not None and str(started.get("job_id", "")).isdigit():
            return str(SlurmHandle(launch_id, str(started["job_id"])))
        return None

    def status(self, handle: str) -> SessionStatus:
        parsed = SlurmHandle.parse(handle)
        record = self.jobs.show(parsed.job_id)
        self._seen[handle] = record
        if record is None:
            # Aged out of slurmctld (MinJobAge) with no accounting: the job's own records say.
            paths = self._paths(parsed.launch_id)
            if paths.slurm_ended.exists() or paths.slurm_started.exists():
                return SessionStatus.FINISHED
            return SessionStatus.LOST
        if record.state in PENDING_STATES:
            return SessionStatus.QUEUED
        if record.state in ENDED_STATES:
            return SessionStatus.FINISHED
        return SessionStatus.RUNNING  # RUNNING, COMPLETING, SUSPENDED, ...

    def collect(self, handle: str, store: Path) -> Collected:
        parsed = SlurmHandle.parse(handle)
        paths = self._paths(parsed.launch_id)
        shutil.rmtree(paths.input, ignore_errors=True)
        ended = _read_json(paths.slurm_ended)
        seconds = None
        if ended is not None:
            seconds = float(ended["ended_at"]) - float(ended["started_at"])
        try:
            result = SegmentResult.read(paths.result)
        except (OSError, ValueError, TypeError):
            return Collected(None, None, None, seconds, self._why_no_result(handle, paths))
        if not result.committed:
            return Collected(result, None, None, seconds, result.error or result.outcome)
        expect = CheckpointRef(result.job_id, result.segment_index, result.end_step)
        try:
            if not store.exists():
                verify_checkpoint(paths.checkpoint, expect)
                _move_into_store(paths.checkpoint, store)
            manifest = verify_checkpoint(store, expect)
        except CorruptCheckpoint as exc:
            return Collected(result, None, None, seconds, one_line(f"checkpoint rejected: {exc}"))
        return Collected(result, manifest, store, seconds, None)

    def _why_no_result(self, handle: str, paths: SessionPaths) -> str:
        record = self._seen.get(handle) or self.jobs.show(SlurmHandle.parse(handle).job_id)
        if record is None:
            state = "ended" if paths.slurm_started.exists() else "never started"
        else:
            state = f"ended {record.state}"
            if record.state == "TIMEOUT":
                state = "was killed by Slurm at its time limit"
            elif record.state == "CANCELLED":
                state = "was cancelled in Slurm (scancel)"
        return one_line(f"the Slurm job {state} without a usable result: {last_line(paths.log)}")

    def cancel(self, handle: str) -> bool:
        self.jobs.cancel(SlurmHandle.parse(handle).job_id)
        return True

    def request_stop(self, handle: str) -> None:
        paths = self._paths(SlurmHandle.parse(handle).launch_id)
        try:
            paths.control.write_text(Command.PAUSE.value)
        except OSError as exc:
            raise Gone(f"the session directory is gone: {exc}") from exc

    def quota(self) -> Quota | None:
        return None

    def progress(self, handle: str) -> Heartbeat | None:
        """The heartbeat the running worker writes on the shared filesystem."""
        path = self._paths(SlurmHandle.parse(handle).launch_id).heartbeat
        return Heartbeat.from_json(_read_json(path))

    def queue_reason(self, handle: str) -> str | None:
        """Slurm's pending reason (Priority, Resources, QOSMaxJobsPerUserLimit...) as last seen."""
        record = self._seen.get(handle)
        if record is not None and record.state in PENDING_STATES:
            return record.reason or "not yet scheduled"
        return None

    def log_file(self, handle: str) -> Path | None:
        try:
            return self._paths(SlurmHandle.parse(handle).launch_id).log
        except Gone:
            return None

    def fetch_checkpoint(self, stored: Path, expect: CheckpointRef) -> int:
        return 0  # a Slurm segment's checkpoint is collected whole from the shared filesystem


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _move_into_store(source: Path, store: Path) -> None:
    """Move a committed checkpoint into the store; across filesystems, copy then rename, so the
    store never holds half a checkpoint under its final name."""
    store.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(source, store)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    partial = store.with_name(f".{store.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(source, partial)
    os.replace(partial, store)
    shutil.rmtree(source, ignore_errors=True)


@dataclass(frozen=True)
class SlurmSite:
    """What every Slurm job of one orchestrator shares: the commands, where sessions live, the
    worker's Python; `backend` adds one job's `slurm:` options."""

    sessions_dir: Path
    jobs: SlurmJobs
    python: str | None = None
    trainer_paths: Sequence[Path] = ()
    poll_seconds: float = POLL_SECONDS

    def backend(self, options: SlurmSpec) -> SlurmBackend:
        return SlurmBackend(
            self.sessions_dir,
            options,
            self.jobs,
            python=self.python,
            trainer_paths=self.trainer_paths,
            poll_seconds=self.poll_seconds,
        )
