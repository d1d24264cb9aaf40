"""The Hugging Face Trainer, joined by Baton's callback: chained over real worker processes it
ends with the uninterrupted run's weights and the same loss at every logged step."""

import itertools

import pytest

from tests.support.segments import (
    make_root,
    make_spec,
    next_spec,
    output_checkpoint,
    read_result,
    run_worker,
    terminate_after_step,
)
from worker.boundary.contract import Outcome, SegmentSpec
from worker.boundary.manifest import verify_checkpoint
from worker.hf import StepPositionedSampler

TOTAL_STEPS = 12
# Steps padded to a fixed time, so a SIGTERM after a logged step lands well before the end.
CONFIG = {"step_seconds": 0.25, "grad_accum": 2}

pytestmark = pytest.mark.slow


def hf_spec(**overrides) -> SegmentSpec:
    return make_spec(
        job_id="hf-lm",
        trainer="trainers.hf_lm:HFCausalLM",
        config=CONFIG,
        total_steps=TOTAL_STEPS,
        seed=11,
        **overrides,
    )


def test_chained_hf_trainer_matches_the_uninterrupted_run(tmp_path):
    whole_spec = hf_spec()
    whole_root = make_root(tmp_path / "whole", whole_spec)
    finished = run_worker(whole_root)
    assert finished.returncode == 0, finished.stderr[-3000:]
    whole = read_result(whole_root, whole_spec)
    assert (whole.outcome, whole.end_step) == (Outcome.COMPLETED, TOTAL_STEPS)

    spec, root, results = hf_spec(), None, []
    for index, stop_after in enumerate([3, 7, None]):
        if results:
            spec = next_spec(spec, results[-1])
        previous, root = root, tmp_path / f"seg{index}"
        make_root(root, spec, resume_from=output_checkpoint(previous, spec) if previous else None)
        if stop_after is None:
            returncode = run_worker(root).returncode
        else:
            returncode = terminate_after_step(root, stop_after)
        assert returncode == 0
        results.append(read_result(root, spec))

    assert [r.outcome for r in results] == [Outcome.STOPPED, Outcome.STOPPED, Outcome.COMPLETED]
    for before, after in itertools.pairwise(results):
        assert after.start_step == before.end_step > before.start_step
    assert verify_checkpoint(output_checkpoint(root, spec)).model_digest == whole.model_digest
    assert results[-1].model_digest == whole.model_digest
    # Every step is logged: loss, learning rate and grad norm match at each one.
    chained = [m for r in results for m in r.metrics]
    assert chained == whole.metrics
    assert [m["step"] for m in chained] == list(range(1, TOTAL_STEPS + 1))


def test_sampler_resumes_at_the_step_without_replaying(tmp_path):
    def order(step: int) -> list[int]:
        sampler = StepPositionedSampler(
            10, seed=3, samples_per_step=4, total_steps=6, current_step=lambda: step
        )
        return list(sampler)

    whole = order(0)
    assert len(whole) == 24  # crosses two epoch boundaries of 10 samples
    assert sorted(whole[:10]) == list(range(10))
    for step in (1, 2, 3, 5):
        assert order(step) == whole[step * 4 :]
