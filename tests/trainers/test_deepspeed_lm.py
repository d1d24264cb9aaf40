"""DeepSpeed ZeRO-2 and ZeRO-3 on two CPU ranks (gloo, torch_adam) through Baton's worker:
chained sessions end equal to the uninterrupted run, and every generated config is one
DeepSpeed itself accepts."""

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
from trainers.deepspeed_lm import DEFAULTS, OFFLOADS, deepspeed_config, validate_deepspeed_config
from worker.boundary.contract import Outcome, SegmentSpec
from worker.boundary.manifest import verify_checkpoint

TOTAL_STEPS = 10
CONFIG = {"log_every": 1, "step_seconds": 0.3}


def ds_spec(stage: int, **overrides) -> SegmentSpec:
    return make_spec(
        job_id=f"zero{stage}",
        trainer="trainers.deepspeed_lm:DeepSpeedCausalLM",
        config={**CONFIG, "zero_stage": stage},
        total_steps=TOTAL_STEPS,
        seed=17,
        nproc=2,
        **overrides,
    )


@pytest.mark.slow
@pytest.mark.timeout(1800)  # eight two-rank sessions, each importing DeepSpeed in every rank
@pytest.mark.parametrize("stage", [2, 3])
def test_zero_chains_across_sessions_to_the_uninterrupted_run(tmp_path, stage):
    whole_spec = ds_spec(stage)
    whole_root = make_root(tmp_path / "whole", whole_spec)
    finished = run_worker(whole_root, timeout=600)
    assert finished.returncode == 0, finished.stderr[-3000:]
    whole = read_result(whole_root, whole_spec)
    assert (whole.outcome, whole.end_step) == (Outcome.COMPLETED, TOTAL_STEPS)

    spec, root, results = ds_spec(stage), None, []
    for index, stop_after in enumerate([2, 5, None]):
        if results:
            spec = next_spec(spec, results[-1])
        previous, root = root, tmp_path / f"seg{index}"
        make_root(root, spec, resume_from=output_checkpoint(previous, spec) if previous else None)
        if stop_after is None:
            returncode = run_worker(root, timeout=600).returncode
        else:
            returncode = terminate_after_step(root, stop_after, timeout=600)
        assert returncode == 0
        results.append(read_result(root, spec))
        # Every rank's optimizer partition is part of the one commit.
        files = verify_checkpoint(output_checkpoint(root, spec)).files
        assert {f for f in files if f.endswith("optim_states.pt")} == {
            f"deepspeed/baton/zero_pp_rank_{rank}_mp_rank_00_optim_states.pt" for rank in (0, 1)
        }

    assert [r.outcome for r in results] == [Outcome.STOPPED, Outcome.STOPPED, Outcome.COMPLETED]
    for before, after in itertools.pairwise(results):
        assert after.start_step == before.end_step > before.start_step
    assert results[-1].model_digest == whole.model_digest
    assert [m for r in results for m in r.metrics] == whole.metrics


@pytest.mark.parametrize("stage", [2, 3])
@pytest.mark.parametrize("offload", OFFLOADS)
@pytest.mark.parametrize("precision", ["fp16", "bf16", "no"])
def test_every_generated_config_is_accepted_by_deepspeed(stage, offload, precision):
    cfg = {**DEFAULTS, "zero_stage": stage, "offload": offload}
    if offload == "optimizer+params" and stage != 3:
        with pytest.raises(ValueError, match="zero_stage 3"):
            deepspeed_config(cfg, precision, total_steps=100)
        return
    parsed = validate_deepspeed_config(deepspeed_config(cfg, precision, total_steps=100))
    assert parsed.zero_optimization_stage == stage
    assert parsed.float16_config.enabled is (precision == "fp16")
    assert parsed.bfloat16_config.enabled is (precision == "bf16")
    assert (parsed.zero_config.offload_optimizer is None) is (offload == "none")
    assert (parsed.zero_config.offload_param is None) is (offload != "optimizer+params")
    assert parsed.gradient_accumulation_steps == DEFAULTS["grad_accum"]


def test_deepspeed_rejects_what_the_generator_must_never_emit():
    # The check is real: DeepSpeed refuses a config with contradictory precision.
    broken = deepspeed_config({**DEFAULTS}, "fp16", total_steps=100)
    broken["bf16"] = {"enabled": True}
    with pytest.raises((ValueError, AssertionError)):
        validate_deepspeed_config(broken)
