"""The one seam to Slurm: its commands, run on this host (a login node), and their answers parsed.

Baton needs no root and no slurmrestd: only `sbatch`, `squeue`, `scontrol`, `scancel` and, where
accounting is configured, `sacct`, as the submitting user. Tests of the parsing hand `SlurmJobs`
a runner that replays recorded answers; everything else runs the real commands.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from orchestrator.backends.base import AccountRefused, Rejected, Transient
from worker.reasons import one_line

DEFAULT_TIMEOUT_SECONDS = 30.0

# sbatch refusals no retry of the segment can change: the account or the request is wrong.
_REFUSALS = (
    "invalid account",
    "invalid partition",
    "invalid qos",
    "requested time limit is invalid",
    "requested node configuration is not available",
    "invalid generic resource",
    "invalid gres",
    "access/permission denied",
    "user's group not permitted",
)
# Answers that mean "busy, or not reachable now": the next tick may succeed.
_BUSY = (
    "temporarily unavailable",
    "socket timed out",
    "unable to contact slurm controller",
    "connection refused",
    "qosmaxsubmitjob",
    "maxsubmitjob",
    "resource temporarily",
    "slurm_persist_conn",
    "communication connection failure",
)


@dataclass(frozen=True)
class Answer:
    returncode: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        return one_line(self.stderr.strip() or self.stdout.strip() or f"exit {self.returncode}")


class CommandRunner(Protocol):
    def __call__(self, argv: Sequence[str]) -> Answer: ...


class SlurmCommands:
    """Runs a Slurm command with the orchestrator's environment (SLURM_CONF and the like)."""

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        self.env = dict(os.environ if env is None else env)
        self.timeout = timeout

    def __call__(self, argv: Sequence[str]) -> Answer:
        try:
            done = subprocess.run(
                list(argv),
                capture_output=True,
                text=True,
                env=self.env,
                timeout=self.timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except FileNotFoundError:
            raise Rejected(f"{argv[0]} is not installed on this host") from None
        except subprocess.TimeoutExpired:
            raise Transient(f"{argv[0]} gave no answer within {self.timeout:g} s") from None
        return Answer(done.returncode, done.stdout, done.stderr)


@dataclass(frozen=True)
class JobRecord:
    """What `scontrol show job` (or `sacct`, or `squeue`) says about one job."""

    job_id: str
    state: str  # PENDING, RUNNING, COMPLETED, CANCELLED, TIMEOUT, ...
    reason: str | None  # why it is pending (Priority, Resources, ...), or None
    name: str = ""
    comment: str = ""
    start_time: float | None = None  # epoch seconds; for a pending job, Slurm's estimate
    end_time: float | None = None
    exit_code: str | None = None  # "0:0": the script's code, then the signal


# Slurm's job states: where each leaves a session (base.SessionStatus).
PENDING_STATES = frozenset(
    {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
)
ENDED_STATES = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)


def parse_scontrol_record(text: str) -> dict[str, str]:
    """`scontrol show job -o` (one line of Key=Value pairs) as a dict.

    A value may hold spaces (a command, a path): a word without '=' belongs to the value before.
    """
    fields: dict[str, str] = {}
    key: str | None = None
    for word in text.strip().split(" "):
        name, sep, value = word.partition("=")
        if sep and name and name.replace("/", "").replace(":", "").isalnum():
            key = name
            fields[key] = value
        elif key is not None:
            fields[key] += " " + word
    return fields


def slurm_time(text: str | None) -> float | None:
    """A Slurm timestamp (`2026-11-23T23:21:59`, the cluster's local time) in epoch seconds."""
    if not text or text in ("Unknown", "None", "N/A"):
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def record_from_scontrol(fields: Mapping[str, str]) -> JobRecord:
    state = fields.get("JobState", "UNKNOWN").split()[0]
    reason = fields.get("Reason")
    return JobRecord(
        job_id=fields.get("JobId", ""),
        state=state,
        reason=None if reason in (None, "None") else reason,
        name=fields.get("JobName", ""),
        comment="" if fields.get("Comment") in (None, "(null)") else fields["Comment"].strip(),
        start_time=slurm_time(fields.get("StartTime")),
        end_time=slurm_time(fields.get("EndTime")),
        exit_code=fields.get("ExitCode"),
    )


def parse_job_id(sbatch_output: str) -> str:
    """`sbatch --parsable` prints `<job id>` or `<job id>;<cluster>`."""
    first = sbatch_output.strip().splitlines()[-1] if sbatch_output.strip() else ""
    job_id = first.split(";")[0]
    if not job_id.isdigit():
        raise Transient(f"sbatch answered without a job id: {one_line(sbatch_output)[:200]}")
    return job_id


def classify_failure(command: str, answer: Answer) -> Exception:
    """The backend error for a command that failed (base.py's error contract)."""
    lowered = answer.text.lower()
    if any(marker in lowered for marker in _BUSY):
        return Transient(f"{command}: {answer.text}", retry_after=30.0)
    if command == "sbatch" and any(marker in lowered for marker in _REFUSALS):
        return AccountRefused(f"Slurm refused the job: {answer.text}")
    return Rejected(f"{command}: {answer.text}")


class SlurmJobs:
    """Slurm's jobs as Baton needs them: submit, look up by id or by name, cancel."""

    def __init__(self, run: CommandRunner) -> None:
        self.run = run
        self._accounting: bool | None = None

    def submit(self, options: Sequence[str], script: str) -> str:
        answer = self.run(["sbatch", "--parsable", *options, script])
        if answer.returncode != 0:
            raise classify_failure("sbatch", answer)
        return parse_job_id(answer.stdout)

    def show(self, job_id: str) -> JobRecord | None:
        """The job as slurmctld knows it, or None once it aged out (MinJobAge) or never was."""
        answer = self.run(["scontrol", "show", "job", "-o", job_id])
        if answer.returncode != 0:
            if "invalid job id" in answer.text.lower():
                return self.accounted(job_id)
            raise classify_failure("scontrol", answer)
        line = next((ln for ln in answer.stdout.splitlines() if ln.startswith("JobId=")), "")
        if not line:
            return self.accounted(job_id)
        return record_from_scontrol(parse_scontrol_record(line))

    def named(self, name: str) -> list[JobRecord]:
        """Every job slurmctld (or accounting) knows under this job name, any state."""
        answer = self.run(["squeue", "-h", "-t", "all", "--name", name, "-o", "%i|%T|%r|%j|%k"])
        if answer.returncode != 0:
            raise classify_failure("squeue", answer)
        found = [_record_from_squeue(line) for line in answer.stdout.splitlines() if line.strip()]
        if not found and self.has_accounting():
            found = self._sacct(["--name", name])
        return found

    def accounted(self, job_id: str) -> JobRecord | None:
        if not self.has_accounting():
            return None
        records = self._sacct(["-j", job_id])
        return records[0] if records else None

    def has_accounting(self) -> bool:
        """Whether `sacct` answers here (accounting is configured); asked once."""
        if self._accounting is None:
            answer = self.run(["sacct", "-n", "-X", "-P", "-o", "JobID", "-S", "now"])
            self._accounting = answer.returncode == 0
        return self._accounting

    def _sacct(self, which: list[str]) -> list[JobRecord]:
        # Accounting keeps every job; a week back covers any segment Baton still watches.
        fields = "JobID,State,Reason,JobName,Comment,Start,End,ExitCode"
        answer = self.run(["sacct", "-n", "-X", "-P", "-S", "now-7days", "-o", fields, *which])
        if answer.returncode != 0:
            raise classify_failure("sacct", answer)
        return [_record_from_sacct(line) for line in answer.stdout.splitlines() if line.strip()]

    def cancel(self, job_id: str) -> None:
        answer = self.run(["scancel", job_id])
        if answer.returncode != 0 and "invalid job id" not in answer.text.lower():
            raise classify_failure("scancel", answer)


def _record_from_squeue(line: str) -> JobRecord:
    job_id, state, reason, name, comment = (line.split("|", 4) + [""] * 5)[:5]
    return JobRecord(
        job_id=job_id.strip(),
        state=state.strip(),
        reason=None if reason.strip() in ("", "None") else reason.strip(),
        name=name,
        comment="" if comment == "(null)" else comment,
    )


def _record_from_sacct(line: str) -> JobRecord:
    parts = (line.split("|") + [""] * 8)[:8]
    job_id, state, reason, name, comment, start, end, exit_code = parts
    return JobRecord(
        job_id=job_id,
        # "CANCELLED by 0" names who cancelled; the state is its first word.
        state=state.split()[0] if state else "UNKNOWN",
        reason=None if reason in ("", "None") else reason,
        name=name,
        comment=comment,
        start_time=slurm_time(start),
        end_time=slurm_time(end),
        exit_code=exit_code or None,
    )
