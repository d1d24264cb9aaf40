"""An orchestrator process on the test Slurm that SIGKILLs itself right after `sbatch` returns.

`python -m tests.support.slurm_orchestrator DB_URL DATA_DIR JOB_ID DIE_AT` reconciles JOB_ID until
it finishes; DIE_AT is "submitted" (kill -9 once the first sbatch has answered, before the
engine records the handle) or "never". SLURM_CONF comes from the environment.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from orchestrator.backends.base import LaunchRequest
from orchestrator.backends.registry import StaticBackends
from orchestrator.backends.slurm.backend import SlurmBackend
from orchestrator.backends.slurm.commands import SlurmCommands, SlurmJobs
from orchestrator.db import Database
from orchestrator.engine import Engine
from orchestrator.spec import SlurmSpec
from tests.support.crashing_orchestrator import reconcile_until_finished


class DyingSlurmBackend(SlurmBackend):
    def __init__(self, sessions_dir: Path, die_at: str) -> None:
        super().__init__(sessions_dir, SlurmSpec(), SlurmJobs(SlurmCommands()), poll_seconds=1.0)
        self.die_at = die_at

    def launch(self, request: LaunchRequest) -> str:
        handle = super().launch(request)
        if self.die_at == "submitted":  # the job is in Slurm; its handle is not recorded
            os.kill(os.getpid(), signal.SIGKILL)
        return handle


def main(argv: list[str]) -> int:
    url, data_dir, job_id, die_at = argv[1:5]
    data = Path(data_dir)
    backend = DyingSlurmBackend(data / "slurm", die_at)
    db = Database(url)
    engine = Engine(db, StaticBackends({"slurm": backend}), data / "checkpoints", lease_seconds=2)
    return reconcile_until_finished(engine, db, job_id, timeout=400, poll=0.2)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
