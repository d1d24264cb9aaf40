"""Two CPU ranks under torchrun, through the accelerate trainer: chained sessions, one stop
step per segment on every rank, a killed rank, and the uninterrupted run's digest at the end."""

import dataclasses
import itertools
import time
from pathlib import Path

import pytest
import torch

from tests.support.segments import (
    make_root,
    make_spec,
    next_spec,
    output_checkpoint,
    read_result,
    run_worker,
    terminate_after_step,
)
from trainers.causal_lm import choose_precision
from worker.checkpoint import runtime_state_file
from worker.contract import Outcome, SegmentResult, SegmentSpec
from worker.manifest import CorruptCheckpoint, verify_checkpoint
from worker.runtime import EXIT_FAILED

TOTAL_STEPS = 14
RANKS = 2
# Steps padded to a fixed duration: a SIGTERM sent after a logged step always lands several
# steps before the end, on a fast machine or a loaded one.
CONFIG = {"log_every": 1, "step_seconds": 0.25, "grad_accum": 2, "gradient_checkpointing": True}

pytestmark = pytest.mark.slow


def acc_spec(**overrides) -> SegmentSpec:
    fields = {
        "job_id": "acc-lm",
        "trainer": "trainers.accelerate_lm:AccelerateCausalLM",
        "config": CONFIG,
        "total_steps": TOTAL_STEPS,
        "seed": 5,
        "nproc": RANKS,
        **overrides,
    }
    return make_spec(**fields)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> SegmentResult:
    spec = acc_spec()
    root = make_root(tmp_path_factory.mktemp("whole"), spec)
    finished = run_worker(root)
    assert finished.returncode == 0, finished.stderr[-3000:]
    result = read_result(root, spec)
    assert (result.outcome, result.end_step) == (Outcome.COMPLETED, TOTAL_STEPS)
    return result


@pytest.fixture(scope="module")
def first_segment(tmp_path_factory) -> tuple[SegmentSpec, SegmentResult, Path]:
    """Segment 0, stopped by SIGTERM after step 3: the start of every chain below."""
    spec = acc_spec()
    root = make_root(tmp_path_factory.mktemp("seg0"), spec)
    assert terminate_after_step(root, 3) == 0
    return spec, read_result(root, spec), output_checkpoint(root, spec)


def rank_steps(checkpoint: Path) -> list[int]:
    """The step each rank recorded as its own stop step in the committed checkpoint."""
    return [
        int(torch.load(checkpoint / runtime_state_file(rank), weights_only=True)["step"])
        for rank in range(RANKS)
    ]


def test_chained_two_rank_run_ends_with_the_uninterrupted_digest(
    tmp_path, uninterrupted, first_segment
):
    spec, first, checkpoint = first_segment
    assert rank_steps(checkpoint) == [first.end_step] * RANKS
    results = [first]
    for index, stop_after in enumerate([first.end_step + 3, None], start=1):
        spec = next_spec(spec, results[-1])
        root = make_root(tmp_path / f"seg{index}", spec, resume_from=checkpoint)
        if stop_after is None:
            returncode = run_worker(root).returncode
        else:
            returncode = terminate_after_step(root, stop_after)
        assert returncode == 0
        results.append(read_result(root, spec))
        checkpoint = output_checkpoint(root, spec)
        manifest = verify_checkpoint(checkpoint)
        # Both ranks stopped at the step rank 0 committed.
        assert manifest.step == results[-1].end_step
        assert rank_steps(checkpoint) == [manifest.step] * RANKS

    assert [r.outcome for r in results] == [Outcome.STOPPED, Outcome.STOPPED, Outcome.COMPLETED]
    for before, after in itertools.pairwise(results):
        assert after.start_step == before.end_step > before.start_step
    assert results[-1].end_step == TOTAL_STEPS
    assert results[-1].model_digest == uninterrupted.model_digest
    chained = {m["step"]: m["loss"] for r in results for m in r.metrics}
    assert chained == {m["step"]: m["loss"] for m in uninterrupted.metrics}


def test_a_killed_rank_fails_the_segment_fast_and_the_retry_resumes(
    tmp_path, uninterrupted, first_segment
):
    first_spec, first, resume = first_segment
    marker = tmp_path / "rank1-killed"
    faulty = dataclasses.replace(
        next_spec(first_spec, first),
        trainer="tests.support.rank_faults:RankKillingAccelerateLM",
        config={
            **CONFIG,
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
    # The error names the rank that died, not rank 0's broken connection to it.
    assert (result.error or "").startswith("rank 1 was killed by SIGKILL"), result.error
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
