"""Two CPU ranks under torchrun, through the accelerate trainer: a killed rank fails its segment
fast and the retry resumes to the uninterrupted run's digest (the chain itself runs in
test_chained_digest.py, from the same first segment)."""

import dataclasses
import time

import pytest

from tests.support.chains import ChainRuns
from tests.support.segments import (
    make_root,
    next_spec,
    output_checkpoint,
    read_result,
    run_worker,
)
from tests.trainers.chain_cases import ACCELERATE, first_segment
from trainers.causal_lm import choose_precision
from worker.boundary.contract import Outcome
from worker.boundary.manifest import CorruptCheckpoint, verify_checkpoint
from worker.runtime import EXIT_FAILED


def test_a_killed_rank_fails_the_segment_fast_and_the_retry_resumes(
    tmp_path, chain_runs: ChainRuns
):
    uninterrupted = chain_runs.whole(ACCELERATE.name, ACCELERATE.spec)
    first_chain = first_segment(chain_runs, ACCELERATE)
    first_spec, first = first_chain.specs[0], first_chain.results[0]
    resume = first_chain.checkpoint
    marker = tmp_path / "rank1-killed"
    faulty = dataclasses.replace(
        next_spec(first_spec, first),
        trainer="tests.support.rank_faults:RankKillingAccelerateLM",
        config={
            **ACCELERATE.spec.config,
            "kill_rank": 1,
            "kill_at_step": first.end_step + 2,
            "fault_marker": str(marker),
        },
    )
    killed_root = make_root(tmp_path / "seg1-killed", faulty, resume_from=resume)

    killed = run_worker(killed_root)
    ended = time.time()
    assert killed.returncode == EXIT_FAILED
    assert "SIGKILL" in killed.stderr  # torchrun saw the rank die of the kill, not an error
    assert ended - float(marker.read_text()) < 10
    result = read_result(killed_root, faulty)
    assert result.outcome == Outcome.FAILED
    assert result.end_step == first.end_step
    with pytest.raises(CorruptCheckpoint):
        verify_checkpoint(output_checkpoint(killed_root, faulty))

    retry_root = make_root(tmp_path / "seg1-retry", faulty, resume_from=resume)
    retried = run_worker(retry_root)
    assert retried.returncode == 0, retried.stderr[-3000:]
    assert read_result(retry_root, faulty).model_digest == uninterrupted.model_digest


@pytest.mark.parametrize(
    ("device", "bf16", "precision"),
    [("cuda", False, "fp16"), ("cuda", True, "bf16"), ("cpu", False, "no")],
)
def test_precision_follows_the_device(device, bf16, precision):
    assert choose_precision(device, bf16) == precision
