"""The real `python -m worker` process: killed mid-commit, it leaves no valid checkpoint."""

import signal

import pytest

from tests.support.segments import make_root, make_spec, output_checkpoint, read_result, run_worker
from worker.boundary.contract import Outcome
from worker.boundary.manifest import CorruptCheckpoint, verify_checkpoint
from worker.boundary.paths import RESULT_FILE
from worker.checkpoint import TMP_PREFIX


def test_sigkill_during_commit_leaves_nothing_valid_and_a_retry_succeeds(tmp_path):
    marker = tmp_path / "killed-once"
    spec = make_spec(
        total_steps=20,
        config={"kill_during_save_segment": 0, "fault_marker": str(marker)},
    )
    root = make_root(tmp_path / "session", spec)
    working = root / spec.output_dir

    killed = run_worker(root)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with pytest.raises(CorruptCheckpoint):
        verify_checkpoint(output_checkpoint(root, spec))
    [torn] = [p for p in working.iterdir() if p.name.startswith(TMP_PREFIX)]
    with pytest.raises(CorruptCheckpoint, match="no manifest"):
        verify_checkpoint(torn)
    assert not (working / RESULT_FILE).exists()

    retried = run_worker(root)
    assert retried.returncode == 0, retried.stderr
    assert verify_checkpoint(output_checkpoint(root, spec)).step == 20
    assert read_result(root, spec).outcome == Outcome.COMPLETED
    assert not torn.exists()
