"""Way (d): submitit's LocalExecutor with a Checkpointable trainer, the peer a Slurm user picks.

submitit's local controller sends USR2 `signal_delay_s` before `timeout_min`; the job's handler
calls our `checkpoint()` right there, inside the signal handler, then exits with code 144, and the
controller starts the job again from the pickled `DelayedSubmission` it returned. Findings from
reading submitit 1.5.x (`local/local.py`, `core/job_environment.py`) are in docs/benchmarks.md.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import submitit

from benchmarks.loop import ResumedTraining, read_events, session_record
from benchmarks.records import WayResult
from benchmarks.workload import Workload
from worker.boundary.manifest import read_manifest
from worker.boundary.paths import CHECKPOINT_DIR
from worker.proctime import process_start_time

KEY, TITLE = "d", "submitit LocalExecutor"
# The local controller restarts a job at most 6 times per submission (Controller.run's
# max_retry), whatever max_num_timeout says; this only keeps submitit's own count out of the way.
MAX_NUM_TIMEOUT = 20
_POLL_SECONDS = 0.1


class CheckpointableTraining(submitit.helpers.Checkpointable):
    """Trains the workload to the end; on submitit's signal, saves and asks to be requeued."""

    def __init__(self, workload: dict[str, Any], run_dir: str) -> None:
        self.workload = workload
        self.run_dir = run_dir
        self.training: ResumedTraining | None = None

    def __call__(self) -> str:
        process_start = process_start_time()
        run_dir = Path(self.run_dir)
        session = len(list(run_dir.glob("events-*.jsonl")))
        self.training = ResumedTraining(
            Workload.from_dict(self.workload), run_dir, session, process_start
        )
        while not self.training.done:
            self.training.train_step()
        digest = self.training.save()
        self.training.events.write("done", step=self.training.step)
        return digest

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission:
        # Runs inside the USR2 handler, at whatever bytecode the main thread had reached.
        training = self.training
        if training is not None:
            training.events.write("signal", step=training.step, in_step=training.in_step)
            training.save()
        fresh = CheckpointableTraining(self.workload, self.run_dir)
        return submitit.helpers.DelayedSubmission(fresh, *args, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        return {"workload": self.workload, "run_dir": self.run_dir, "training": None}


def _timeout_min(seconds: float) -> float:
    # LocalExecutor truncates: SUBMITIT_LOCAL_TIMEOUT_S = int(60 * timeout_min).
    return (seconds + 0.5) / 60


def run(workload: Workload, workdir: Path, timeout: float = 600) -> WayResult:
    run_dir = workdir / "run"
    run_dir.mkdir(parents=True)
    executor = submitit.LocalExecutor(folder=workdir / "submitit", max_num_timeout=MAX_NUM_TIMEOUT)
    executor.update_parameters(
        timeout_min=_timeout_min(workload.session_seconds), signal_delay_s=workload.signal_delay_s
    )
    started = time.time()
    job = executor.submit(CheckpointableTraining(workload.to_dict(), str(run_dir)))
    while not job.done():
        if time.time() - started > timeout:
            job.cancel()
            raise RuntimeError(f"submitit job did not finish in {timeout} s")
        time.sleep(_POLL_SECONDS)
    ended = time.time()
    problem = None
    try:
        job.result()
    except Exception as exc:  # submitit re-raises the job's failure; report it, don't crash
        problem = f"job failed: {str(exc).strip().splitlines()[-1]}"
    return _collect(workload, run_dir, started, ended, problem)


def _collect(
    workload: Workload, run_dir: Path, started: float, ended: float, problem: str | None
) -> WayResult:
    logs = [read_events(path) for path in sorted(run_dir.glob("events-*.jsonl"))]
    starts = [events[0]["process_start"] for events in logs] + [ended]
    sessions, signals = [], []
    step = 0
    for index, events in enumerate(logs):
        signal = next((e for e in events if e["event"] == "signal"), None)
        done = any(e["event"] == "done" for e in events)
        outcome = "completed" if done else ("requeued" if signal else "lost")
        record = session_record(events, step, starts[index + 1] - starts[index], outcome)
        sessions.append(record)
        step = record.kept_to
        if signal is not None:
            signals.append(
                {"after_start": signal["t"] - starts[index], "in_step": signal["in_step"]}
            )
    checkpoint = run_dir / CHECKPOINT_DIR
    manifest = read_manifest(checkpoint) if checkpoint.exists() else None
    nominal = int(60 * _timeout_min(workload.session_seconds)) - workload.signal_delay_s
    notes = [f"USR2 {workload.signal_delay_s} s before a {workload.session_seconds:g} s limit"]
    if problem:
        notes.append(problem)
    mid_step = sum(1 for s in signals if s["in_step"])
    if signals:
        notes.append(f"signal landed inside a step at {mid_step} of {len(signals)} boundaries")
    return WayResult(
        KEY,
        TITLE,
        sessions,
        ended - started,
        manifest.step if manifest else 0,
        manifest.model_digest if manifest else None,
        notes=notes,
        extra={
            "limit": workload.session_seconds,
            "signals": signals,
            "nominal_signal_after_start": nominal,
        },
    )
