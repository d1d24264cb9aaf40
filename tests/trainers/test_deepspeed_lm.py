"""Every DeepSpeed config Baton generates is one DeepSpeed itself accepts (ZeRO-2 and ZeRO-3
chained on two CPU ranks: test_chained_digest.py)."""

import pytest

from trainers.deepspeed_lm import DEFAULTS, OFFLOADS, deepspeed_config, validate_deepspeed_config


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
