"""The Hugging Face Trainer, joined by Baton's callback, through segments that take no step: they
commit, and the job still ends on the uninterrupted run's weights; its sampler resumes at a step.
(Its chain of stopped segments, with the Trainer's own bookkeeping, is HF in chain_cases.py.)"""

import dataclasses

import pytest

from tests.support.chains import ChainRuns
from tests.support.gates import WAITING_LOG
from tests.support.segments import (
    make_root,
    next_spec,
    output_checkpoint,
    read_result,
    run_worker,
    start_worker,
    terminate_after_step,
)
from tests.trainers.chain_cases import HF
from worker.boundary.contract import Estimates, Outcome
from worker.boundary.manifest import verify_checkpoint
from worker.hf import StepPositionedSampler

pytestmark = pytest.mark.slow


def test_segments_that_take_no_step_commit_and_chain_to_the_uninterrupted_run(
    tmp_path, chain_runs: ChainRuns
):
    """A pause during load (before the Trainer built its optimizer) and a deadline before the
    first step each commit a checkpoint; the job still ends on the uninterrupted weights."""
    whole = chain_runs.whole(HF.name, HF.spec)
    gate = tmp_path / "gate"
    spec = dataclasses.replace(
        HF.spec,
        trainer="tests.support.hf_trainers:GatedHFCausalLM",
        config={**HF.spec.config, "load_gate": str(gate)},
    )
    root = make_root(tmp_path / "seg0", spec)
    process = start_worker(root)
    assert process.stderr is not None
    for line in process.stderr:
        if WAITING_LOG in line:
            process.terminate()  # the pause arrives while the trainer loads
            gate.touch()
            break
    process.communicate(timeout=120)
    assert process.returncode == 0
    paused = read_result(root, spec)
    assert (paused.outcome, paused.start_step, paused.end_step) == (Outcome.STOPPED, 0, 0)
    assert verify_checkpoint(output_checkpoint(root, spec)).step == 0

    results = [paused]
    # Then a few steps, then a session whose first step would already overrun its deadline.
    for index, kind in enumerate(["steps", "no-time", "rest"], start=1):
        # The step-time guard for the first step: far longer than the session.
        guard = 10 * spec.limit_seconds if kind == "no-time" else None
        spec = next_spec(spec, results[-1], estimates=Estimates(step_seconds=guard))
        previous, root = root, tmp_path / f"seg{index}"
        make_root(root, spec, resume_from=output_checkpoint(previous, spec))
        if kind == "steps":
            assert terminate_after_step(root, 4) == 0
        else:
            finished = run_worker(root)
            assert finished.returncode == 0, finished.stderr[-3000:]
        results.append(read_result(root, spec))

    no_time = results[2]
    assert (no_time.outcome, no_time.start_step) == (Outcome.DEADLINE, results[1].end_step)
    assert no_time.end_step == no_time.start_step > 0
    recommitted = verify_checkpoint(output_checkpoint(tmp_path / "seg2", spec))
    assert (recommitted.segment_index, recommitted.step) == (2, no_time.end_step)
    assert results[-1].outcome == Outcome.COMPLETED
    assert results[-1].model_digest == whole.model_digest


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
