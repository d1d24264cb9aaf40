"""The batch script, run by bash with stand-ins for scontrol and the worker: Slurm's warning
arriving while the script still starts (as a one-minute allocation's does) must not kill it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

from orchestrator.backends.slurm.script import batch_script, signal_lead
from worker.boundary.paths import SessionPaths


def _stand_ins(bin_dir: Path, end: datetime) -> Path:
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    # Slow, like scontrol on a busy controller: the warning lands while the script waits on it.
    scontrol.write_text(f"#!/bin/bash\nsleep 1\necho JobId=7 EndTime={end:%Y-%m-%dT%H:%M:%S}\n")
    python = bin_dir / "python"
    python.write_text('#!/bin/bash\necho "worker $*"\nsleep 1\n')
    for tool in (scontrol, python):
        tool.chmod(0o755)
    return python


def test_a_warning_during_start_up_arms_the_backstop_instead_of_killing_the_job(
    tmp_path: Path,
) -> None:
    end = datetime.fromtimestamp(int(time.time()) + 60)
    python = _stand_ins(tmp_path / "bin", end)
    paths = SessionPaths(tmp_path / "session")
    paths.root.mkdir()
    script = batch_script(
        paths, python=str(python), limit_seconds=60, env={}, extra_path=[str(python.parent)]
    )
    env = {"SLURM_JOB_ID": "7", "PATH": os.environ["PATH"]}
    proc = subprocess.Popen(["bash", "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "warning signal arrived" in out
    ended = json.loads(paths.slurm_ended.read_text())
    assert ended["exit_code"] == 0
    started = json.loads(paths.slurm_started.read_text())
    assert started["end_time"] == end.timestamp()
    assert float(started["deadline"]) == end.timestamp() - 3


def test_the_warning_is_asked_for_at_most_half_the_allocation_ahead() -> None:
    assert signal_lead(60) == 30
    assert signal_lead(4 * 3600) == 60
