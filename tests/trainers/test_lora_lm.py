"""LoRA through peft: chained sessions match the uninterrupted run, and the checkpoint holds
only the adapters and their optimizer state."""

import itertools

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
from worker.boundary.contract import Outcome, SegmentSpec
from worker.boundary.manifest import verify_checkpoint
from worker.trainer import TRAINER_STATE_FILE

TOTAL_STEPS = 12
LORA = {"r": 4, "alpha": 8, "dropout": 0.1, "target_modules": ["q_proj", "v_proj"]}
CONFIG = {"log_every": 1, "step_seconds": 0.25, "lora": LORA}
# 2 layers x 2 modules x (A: 4 x 64 + B: 64 x 4) adapter parameters.
ADAPTER_PARAMS = 2 * 2 * (4 * 64 + 64 * 4)

pytestmark = pytest.mark.slow


def lora_spec(**overrides) -> SegmentSpec:
    return make_spec(
        job_id="lora-lm",
        trainer="trainers.lora_lm:LoraCausalLM",
        config=CONFIG,
        total_steps=TOTAL_STEPS,
        seed=13,
        **overrides,
    )


def test_chained_lora_run_matches_and_saves_only_the_adapters(tmp_path):
    whole_spec = lora_spec()
    whole_root = make_root(tmp_path / "whole", whole_spec)
    finished = run_worker(whole_root)
    assert finished.returncode == 0, finished.stderr[-3000:]
    whole = read_result(whole_root, whole_spec)

    spec, root, results = lora_spec(), None, []
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
    assert results[-1].model_digest == whole.model_digest
    assert [m for r in results for m in r.metrics] == whole.metrics

    checkpoint = output_checkpoint(root, spec)
    manifest = verify_checkpoint(checkpoint)
    state = torch.load(checkpoint / TRAINER_STATE_FILE, weights_only=True)
    assert set(state) == {"adapter", "optimizer", "scheduler", "sampler"}
    assert all("lora_" in name for name in state["adapter"])
    assert sum(t.numel() for t in state["adapter"].values()) == ADAPTER_PARAMS
    moments = [t for s in state["optimizer"]["state"].values() for t in s.values() if t.dim()]
    assert sum(t.numel() for t in moments) == 2 * ADAPTER_PARAMS  # Adam: two per adapter weight
    # fp32 adapters plus two fp32 moments, and a little pickling and RNG state on top.
    payload = 3 * 4 * ADAPTER_PARAMS
    assert payload <= manifest.files[TRAINER_STATE_FILE].bytes <= payload + 16_384
    assert manifest.total_bytes < payload + 40_000  # the frozen base model is never saved
