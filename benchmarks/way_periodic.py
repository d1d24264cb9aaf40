"""Way (c): periodic saves and a hard kill at the limit, each session under Baton's supervisor.

The sessions run `benchmarks.periodic_session` under the same supervisor as Baton's local
backend (SIGTERM at the limit, SIGKILL after the grace period, `working/` dropped). The saves go
to a run directory outside the session, as if the user had turned on Kaggle's "Persistence" or
pushed each save to a hub: generous to this way, since Kaggle keeps nothing from a session that
hits its limit. The next session starts as soon as the previous one has ended.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from benchmarks.loop import events_path, read_events, session_record
from benchmarks.records import WayResult
from benchmarks.workload import Workload
from orchestrator.backends.local.sessions import SessionState, session_state, start_session
from orchestrator.backends.local.supervisor import SessionExit, SessionPlan
from orchestrator.backends.local.warm import shared_host
from worker.boundary.manifest import read_manifest
from worker.boundary.paths import CHECKPOINT_DIR

KEY, TITLE = "c", "periodic save + hard kill"
MAX_SESSIONS = 12
_POLL_SECONDS = 0.1


def _run_session(workload: Workload, run_dir: Path, root: Path, index: int) -> SessionExit:
    root.mkdir(parents=True)
    plan = SessionPlan(
        command=[
            sys.executable,
            "-m",
            "benchmarks.periodic_session",
            str(run_dir),
            str(index),
            json.dumps(workload.to_dict()),
        ],
        limit_seconds=workload.session_seconds,
        grace_seconds=workload.grace_seconds,
        env={"PYTHONPATH": str(Path.cwd()), "PYTHONUNBUFFERED": "1"},
    )
    start_session(root, plan, shared_host())  # as Baton's local backend starts its own
    while session_state(root) is SessionState.RUNNING:
        time.sleep(_POLL_SECONDS)
    ended = SessionExit.read(root)
    if ended is None:
        raise RuntimeError(f"(c) session {index} was lost: see {root}/log.txt")
    return ended


def run(workload: Workload, workdir: Path) -> WayResult:
    run_dir = workdir / "run"
    run_dir.mkdir(parents=True)
    sessions = []
    started = time.time()
    step = 0
    for index in range(MAX_SESSIONS):
        ended = _run_session(workload, run_dir, workdir / "sessions" / f"{index:03d}", index)
        events = read_events(events_path(run_dir, index))
        finished = any(e["event"] == "done" for e in events)
        outcome = "completed" if finished else ("killed" if ended.timed_out else "failed")
        record = session_record(events, step, ended.ended_at - ended.started_at, outcome)
        sessions.append(record)
        step = record.kept_to
        if finished or outcome == "failed":
            break
    total_wall = time.time() - started
    manifest = read_manifest(run_dir / CHECKPOINT_DIR)
    notes = [
        f"save every {workload.save_every} steps; no SIGTERM handler, so the limit kills at once",
        "saves kept outside the session (Kaggle drops a timed-out session's output)",
    ]
    return WayResult(
        KEY, TITLE, sessions, total_wall, manifest.step, manifest.model_digest, notes=notes
    )
