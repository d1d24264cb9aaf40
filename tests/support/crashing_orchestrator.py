"""An orchestrator process that SIGKILLs itself at a chosen moment of a launch.

`python -m tests.support.crashing_orchestrator DB_URL DATA_DIR JOB_ID DIE_AT` reconciles JOB_ID
until it finishes; DIE_AT is one of MOMENTS, or "never". Every spawn of a session process is
logged to DATA_DIR/spawns.log, so a test can count how often each segment really started.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from orchestrator.backends.base import LaunchRequest, SessionStatus
from orchestrator.backends.local.backend import LocalBackend
from orchestrator.backends.local.supervisor import SessionPlan
from orchestrator.backends.registry import StaticBackends
from orchestrator.db import Database
from orchestrator.engine import Engine
from orchestrator.lifecycle import FINISHED_JOB_STATES
from orchestrator.models import Job

MOMENTS = ("intent", "prepared", "spawned", "launched", "running")


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class DyingLocalBackend(LocalBackend):
    def __init__(self, sessions_dir: Path, die_at: str, spawn_log: Path) -> None:
        super().__init__(sessions_dir, grace_seconds=1, poll_seconds=0.1)
        self.die_at = die_at
        self.spawn_log = spawn_log

    def find(self, launch_id: str) -> str | None:
        if self.die_at == "intent":  # the intent is committed; nothing was asked yet
            _die()
        return super().find(launch_id)

    def _start(self, root: Path, plan: SessionPlan) -> None:
        if self.die_at == "prepared":  # the session directory exists; nothing was spawned
            _die()
        with open(self.spawn_log, "a") as log:
            log.write(f"{root.name}\n")
        super()._start(root, plan)
        if self.die_at == "spawned":  # the supervisor is starting, maybe not announced yet
            _die()

    def launch(self, request: LaunchRequest) -> str:
        handle = super().launch(request)
        if self.die_at == "launched":  # the session runs; its handle is not recorded
            _die()
        return handle

    def status(self, handle: str) -> SessionStatus:
        if self.die_at == "running":  # recorded as running; the orchestrator goes away
            _die()
        return super().status(handle)


def main(argv: list[str]) -> int:
    url, data_dir, job_id, die_at = argv[1:5]
    data = Path(data_dir)
    backend = DyingLocalBackend(data / "sessions", die_at, data / "spawns.log")
    db = Database(url)
    engine = Engine(db, StaticBackends({"local": backend}), data / "checkpoints", lease_seconds=2)
    return reconcile_until_finished(engine, db, job_id, timeout=300, poll=0.1)


def reconcile_until_finished(
    engine: Engine, db: Database, job_id: str, *, timeout: float, poll: float
) -> int:
    """Tick the job until it finishes (exit code 0), or 1 after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        engine.reconcile_job(job_id)
        with db.transaction() as session:
            job = session.get(Job, job_id)
            assert job is not None
            if job.state in FINISHED_JOB_STATES:
                return 0
        time.sleep(poll)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
