"""The Hugging Face Trainer, joined by Baton's callback: chained over real worker processes it
ends with the uninterrupted run's weights and the Trainer's own bookkeeping (step, epoch, log),
also through segments that take no step; its sampler resumes at a step. (The chained digests of
every trainer are also checked together in test_chained_digest.py.)"""

import dataclasses
import itertools
import json
from pathlib import Path

import pytest

from tests.support.gates import WAITING_LOG
from tests.support.segments import (
    make_root,
    make_spec,
    next_spec,
    output_checkpoint,
    read_result,
    run_worker,
    start_worker,
    terminate_after_step,
)
from worker.boundary.contract import Estimates, Outcome, SegmentResult, SegmentSpec
from worker.boundary.manifest import verify_checkpoint
from worker.hf import HF_STATE_DIR, SUMMARY_LOG_KEY, TRAINER_STATE_NAME, StepPositionedSampler

TOTAL_STEPS = 12
# Steps padded to a fixed time, so a SIGTERM after a logged step lands well before the end.
# The Trainer evaluates every EVAL_EVERY steps: its eval_loss series is chained too.
EVAL_EVERY = 4
CONFIG = {"step_seconds": 0.25, "grad_accum": 2, "eval_every": EVAL_EVERY}
EVAL_STEPS = list(range(EVAL_EVERY, TOTAL_STEPS + 1, EVAL_EVERY))

pytestmark = pytest.mark.slow


def hf_spec(**overrides) -> SegmentSpec:
    fields = {
        "job_id": "hf-lm",
        "trainer": "trainers.hf_lm:HFCausalLM",
        "config": CONFIG,
        "total_steps": TOTAL_STEPS,
        "seed": 11,
    }
    return make_spec(**{**fields, **overrides})


@dataclasses.dataclass(frozen=True)
class Run:
    root: Path
    spec: SegmentSpec
    result: SegmentResult

    @property
    def trainer_state(self) -> dict:
        path = output_checkpoint(self.root, self.spec) / HF_STATE_DIR / TRAINER_STATE_NAME
        return json.loads(path.read_text())


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Run:
    """The uninterrupted run every chained run must end on."""
    spec = hf_spec()
    root = make_root(tmp_path_factory.mktemp("whole"), spec)
    finished = run_worker(root)
    assert finished.returncode == 0, finished.stderr[-3000:]
    run = Run(root, spec, read_result(root, spec))
    assert (run.result.outcome, run.result.end_step) == (Outcome.COMPLETED, TOTAL_STEPS)
    return run


def without_timing(metrics: list[dict]) -> list[dict]:
    """The metrics without how long an evaluation took (eval_runtime, ..._per_second)."""
    return [
        {k: v for k, v in m.items() if not k.endswith(("_runtime", "_per_second"))} for m in metrics
    ]


def step_logs(state: dict) -> list[dict]:
    return [entry for entry in state["log_history"] if SUMMARY_LOG_KEY not in entry]


def test_chained_hf_trainer_matches_the_uninterrupted_run(tmp_path, whole):
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
    assert (
        verify_checkpoint(output_checkpoint(root, spec)).model_digest == whole.result.model_digest
    )
    assert results[-1].model_digest == whole.result.model_digest
    # Every step is logged: loss, learning rate and grad norm match at each one, and so does
    # every evaluation's eval_loss (each scalar the Trainer logs is kept).
    chained = [m for r in results for m in r.metrics]
    assert without_timing(chained) == without_timing(whole.result.metrics)
    assert [m["step"] for m in chained if "loss" in m] == list(range(1, TOTAL_STEPS + 1))
    evals = [(m["step"], m["eval_loss"]) for m in chained if "eval_loss" in m]
    assert [step for step, _ in evals] == EVAL_STEPS
    assert evals == [(m["step"], m["eval_loss"]) for m in whole.result.metrics if "eval_loss" in m]
    # The Trainer's own bookkeeping chains too: step, epoch and one log entry per step.
    final = Run(root, spec, results[-1]).trainer_state
    expected = whole.trainer_state
    assert (final["global_step"], final["epoch"]) == (TOTAL_STEPS, 1.0)
    assert (final["global_step"], final["epoch"]) == (expected["global_step"], expected["epoch"])
    entries = TOTAL_STEPS + len(EVAL_STEPS) + 1  # steps, evaluations, the summary
    assert len(final["log_history"]) == len(expected["log_history"]) == entries
    assert without_timing(step_logs(final)) == without_timing(step_logs(expected))


def test_segments_that_take_no_step_commit_and_chain_to_the_uninterrupted_run(tmp_path, whole):
    """A pause during load (before the Trainer built its optimizer) and a deadline before the
    first step each commit a checkpoint; the job still ends on the uninterrupted weights."""
    gate = tmp_path / "gate"
    spec = hf_spec(
        trainer="tests.support.hf_trainers:GatedHFCausalLM",
        config={**CONFIG, "load_gate": str(gate)},
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
    assert results[-1].model_digest == whole.result.model_digest


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
