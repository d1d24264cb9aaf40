"""The single-node Slurm the tests use (started by tests/support/slurm_cluster.sh, which .ci/run
runs), and a Slurm backend on it whose sessions live under a test's own directory."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.backends.slurm.backend import SlurmBackend
from orchestrator.backends.slurm.commands import SlurmCommands, SlurmJobs
from orchestrator.spec import SlurmSpec
from tests.factories import require_services
from tests.support.marks import starts_processes
from tests.support.segments import REPO_ROOT

SLURM_DIR = Path(os.environ.get("BATON_SLURM_DIR", "/tmp/baton-slurm"))
CLUSTER_SCRIPT = REPO_ROOT / "tests" / "support" / "slurm_cluster.sh"


@dataclass(frozen=True)
class SlurmCluster:
    conf: Path

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def jobs(self) -> SlurmJobs:
        return SlurmJobs(SlurmCommands(self.env))

    def backend(self, sessions_dir: Path, options: SlurmSpec | None = None) -> SlurmBackend:
        return SlurmBackend(sessions_dir, options or SlurmSpec(), self.jobs(), poll_seconds=1.0)

    def squeue_state(self, job_id: str) -> str:
        done = subprocess.run(
            ["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout.strip()


def _answers(conf: Path) -> bool:
    if not conf.exists() or shutil.which("sinfo") is None:
        return False
    env = {**os.environ, "SLURM_CONF": str(conf)}
    try:
        done = subprocess.run(
            ["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and any(
        state.startswith(("idle", "mixed", "allocated")) for state in done.stdout.split()
    )


def start_cluster() -> SlurmCluster | str:
    """The running cluster, started here if this process may (root, Slurm installed); or why
    there is none."""
    conf = SLURM_DIR / "slurm.conf"
    if _answers(conf):
        return SlurmCluster(conf)
    if os.geteuid() != 0 or shutil.which("slurmctld") is None:
        return "no Slurm cluster is running (tests/support/slurm_cluster.sh starts one, as root)"
    done = subprocess.run(
        ["bash", str(CLUSTER_SCRIPT)], capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0 or not _answers(conf):
        return f"tests/support/slurm_cluster.sh failed: {done.stderr.strip()[-500:]}"
    return SlurmCluster(conf)


@pytest.fixture(scope="session")
@starts_processes
def slurm_cluster() -> SlurmCluster:
    found = start_cluster()
    if isinstance(found, str):
        if require_services():
            pytest.fail(found)
        pytest.skip(found)
    return found
