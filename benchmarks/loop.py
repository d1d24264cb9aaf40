"""An in-process training loop for the peers, built from the same pieces as Baton's worker.

(c) and (d) have no deadline rule and no orchestrator, but they resume exactly like the worker
does (verify, configure torch, seed, set up, load state, restore every RNG last) and save with
the worker's atomic `commit_checkpoint`, so any difference in the results comes from when they
stop and save, not from how. Each session appends its events to `events-NNN.jsonl`, line by
line, so a session killed at any moment still leaves what it did behind.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from benchmarks.records import SessionRecord
from benchmarks.workload import Workload
from worker.boundary.manifest import verify_checkpoint
from worker.boundary.paths import CHECKPOINT_DIR
from worker.checkpoint import commit_checkpoint, read_checkpoint
from worker.rng import capture_rng_state, restore_rng_state, seed_everything
from worker.runtime import configure_torch, import_trainer
from worker.trainer import TrainContext

JOB_ID = "benchmark"


class EventLog:
    """Appends one JSON line per event; line-buffered, so a SIGKILL loses at most a partial line."""

    def __init__(self, path: Path) -> None:
        self._file: TextIO = open(path, "a", buffering=1)  # noqa: SIM115  (lives with the process)

    def write(self, event: str, **fields: Any) -> None:
        self._file.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\n")


def events_path(run_dir: Path, session: int) -> Path:
    return run_dir / f"events-{session:03d}.jsonl"


class ResumedTraining:
    """The workload's trainer, resumed from `run_dir/checkpoint` when one exists."""

    def __init__(self, workload: Workload, run_dir: Path, session: int, process_start: float):
        self.workload = workload
        self.run_dir = run_dir
        self.session = session
        self.events = EventLog(events_path(run_dir, session))
        self.events.write("start", process_start=process_start)
        self.in_step = False
        started = time.time()
        checkpoint = run_dir / CHECKPOINT_DIR
        manifest = verify_checkpoint(checkpoint, None) if checkpoint.exists() else None
        self.step = manifest.step if manifest else 0
        configure_torch(workload.config)
        seed_everything(workload.seed)
        self.trainer = import_trainer(workload.trainer)(
            TrainContext(
                config=workload.config,
                seed=workload.seed,
                job_id=JOB_ID,
                segment_index=session,
                total_steps=workload.total_steps,
                start_step=self.step,
            )
        )
        self.trainer.setup()
        if manifest is not None:
            resume = read_checkpoint(checkpoint, manifest, self.trainer.read_state)
            self.trainer.load_state_dict(resume.trainer)
            restore_rng_state(resume.rng)  # last, like the worker
        self.events.write("loaded", step=self.step, seconds=time.time() - started)

    @property
    def done(self) -> bool:
        return self.step >= self.workload.total_steps

    def train_step(self) -> None:
        started = time.time()
        self.in_step = True
        self.trainer.train_step(self.step)
        self.step += 1
        self.in_step = False
        self.events.write("step", step=self.step, started=started, seconds=time.time() - started)

    def save(self) -> str:
        started = time.time()
        manifest = commit_checkpoint(
            self.run_dir, self.trainer, self.step, capture_rng_state(), JOB_ID, self.session
        )
        self.events.write("save", step=self.step, seconds=time.time() - started)
        return manifest.model_digest


def read_events(path: Path) -> list[dict[str, Any]]:
    events = []
    if not path.exists():
        return events
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut short by a kill
            break
    return events


def session_record(
    events: list[Mapping[str, Any]], start_step: int, wall: float, outcome: str
) -> SessionRecord:
    """A session's record from its events; `kept_to` is its last save, else where it started."""
    start = next((e for e in events if e["event"] == "start"), None)
    loaded = next((e for e in events if e["event"] == "loaded"), None)
    steps = [e for e in events if e["event"] == "step"]
    saves = [e for e in events if e["event"] == "save"]
    first_step = None
    if start is not None and steps:
        first_step = steps[0]["started"] - start["process_start"]
    return SessionRecord(
        wall=wall,
        first_step=first_step,
        load=loaded["seconds"] if loaded else 0.0,
        train=sum(e["seconds"] for e in steps),
        saves=[e["seconds"] for e in saves],
        start_step=start_step,
        trained_to=steps[-1]["step"] if steps else start_step,
        kept_to=saves[-1]["step"] if saves else start_step,
        outcome=outcome,
    )
